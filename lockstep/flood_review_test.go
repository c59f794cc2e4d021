package lockstep

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// namesFlood writes n99's holder folder full of keys with long names, so
// that the names under P/.holders/ are over namesLimit: reads list them
// folder by folder (byFolder), and n99 counts as holding.
func namesFlood(t *testing.T, c *api.Client) {
	t.Helper()
	long := strings.Repeat("n", 400)
	var ops api.TxnOps
	for i := range 3200 {
		for _, key := range []string{HolderKey(testPrefix, "n99", fmt.Sprintf("%s-%d", long, i))} {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key}})
		}
		if len(ops) == 64 {
			if ok, _, _, err := c.Txn().Txn(ops, nil); err != nil || !ok {
				t.Fatalf("flood: ok=%v %v", ok, err)
			}
			ops = nil
		}
	}
}

// Under a names flood, the head of the line lists the names under
// P/.holders/ folder by folder, whose index leaves out the record
// P/.holders; its blocking wait is on Keys(P/.holders), which includes
// it. Once the record was written alone (an older version's write, a
// MarkLost of a claim the record alone keeps, a release with no slot
// key, or any token's rewrite of the shared record), every wait returns
// at once: the head re-reads the holders in a tight loop until something
// under P/.holders/ changes, e.g. for a whole step.
func TestHeadDoesNotSpinOnARecordOnlyWrite(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	g, ctx := commit(t, c, "names-flood-spin", 2), ctxFor(t, time.Minute) // n99 counts as holding
	namesFlood(t, c)
	bc, cnt := boundedClient(srv)
	a, _ := floodedSem(t, bc, "n01")
	b, _ := floodedSem(t, bc, "n02")
	h, err := a.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(t, ctx, b, g)
	time.Sleep(2 * time.Second) // n02 heads the line, full, blocked
	before, bytes := cnt.Total(), cnt.Bytes()
	time.Sleep(3 * time.Second)
	t.Logf("before the write: the head made %d requests and read %d bytes in 3s", cnt.Total()-before, cnt.Bytes()-bytes)

	// The record written alone, with what it holds (a space more, as
	// Consul skips a write of the same bytes): no count changes.
	rec, _, err := c.KV().Get(testPrefix+"/"+holdersKey, nil)
	if err != nil || rec == nil {
		t.Fatalf("record: %v %v", rec, err)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: rec.Key, Value: append(rec.Value, ' ')}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	before, bytes = cnt.Total(), cnt.Bytes()
	time.Sleep(3 * time.Second)
	reqs, read := cnt.Total()-before, cnt.Bytes()-bytes
	t.Logf("the head made %d requests and read %d bytes in 3s while the slot was held", reqs, read)
	select {
	case h2 := <-waiter:
		t.Fatalf("n02 granted beside n01: %v", h2)
	default:
	}
	if reqs > 50 {
		t.Errorf("the head of the line spins: %d requests (%d bytes) in 3s with nothing under the prefix changing", reqs, read)
	}
	// The head still wakes for the release.
	handOver(t, ctx, h, waiter, "n02 was not granted after n01 released")
}

// n99's token writes 33 small holder keys, named by sessions that do not
// exist, and one of 200 KiB: the holders listing is over its bound, the
// read goes key by key, and n99 (past maxKeysPerName) counts as holding
// without a read. At K=1 the line stalls for good; the reason is in the
// agent's log alone. Status (coordinator.Read: one listing of the tree,
// under 4 MiB here, parsed by ParseHolders) sees no holder, no claim and
// no problem: a stall without a reason `rollagent status` shows.
func TestHolderFloodStallShowsInStatus(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	g := commit(t, c, "holder-count-flood", 1)
	var small []string
	for range maxKeysPerName + 1 {
		small = append(small, HolderKey(testPrefix, "n99", fakeSession()))
	}
	flood(t, c, small, 64)
	flood(t, c, []string{HolderKey(testPrefix, "n99", fakeSession())}, 200<<10)
	bc, _ := boundedClient(srv)
	a, alog := floodedSem(t, bc, "n01")
	ctx, cancel := context.WithTimeout(ctxFor(t, time.Minute), 5*time.Second)
	defer cancel()
	h, err := a.Acquire(ctx, g)
	if err == nil {
		_ = h.Release(ctxFor(t, time.Minute))
		return // granted: no stall
	}
	t.Logf("n01 was not granted: %v; its log: %q", err, alog.String())
	pairs, _, err := c.KV().List(testPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := ParseHolders(testPrefix, pairs)
	if st.Problem == "" {
		t.Errorf("the line stalls at K=1 with n99 counted as holding, and status's view says nothing: holding %v, claims %v, waiting %v, problem %q",
			st.Holding, st.Claims, st.Waiting, st.Problem)
	}
}
