package lockstep

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// floodSize is the size of each key a flooding token writes: 16 of them
// made one agent look download 8.7 MB (issue 26).
const floodSize = 400 << 10

// A node's token floods its own contender and holder folders: a join, and
// the head's turn, read it within bounds, name it as a problem, and the
// line still moves (the keys count for no one: their sessions are gone).
// An unbounded read downloads the flood on each of them.
func TestJoinAndHeadReadsBoundedUnderOwnFlood(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	g, ctx := commit(t, c, "own-flood", 1), ctxFor(t, time.Minute)
	flood(t, c, ownFlood("n99", 8), floodSize) // 16 keys, 6.4 MB
	bc, cnt := boundedClient(srv)
	a, alog := floodedSem(t, bc, "n01")
	b, _ := floodedSem(t, bc, "n02")

	before := cnt.Bytes()
	h, err := a.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	joinAndHead := cnt.Bytes() - before
	t.Logf("n01 read %d bytes to join and take the slot", joinAndHead)
	if joinAndHead > lineListLimit+256<<10 {
		t.Errorf("the first contender read %d bytes to join and take the slot", joinAndHead)
	}
	if !strings.Contains(alog.String(), "left unread") || !strings.Contains(alog.String(), "n99") {
		t.Errorf("the flood is not reported: %q", alog.String())
	}
	before = cnt.Bytes()
	waiter := acquireAsync(t, ctx, b, g)
	waitInLine(t, c, 1, "n02 in line")
	wantGrantedAfterRelease(t, ctx, waiter, h, "n02 was granted while n01 held", "n02 was not granted after n01 released")
	// n02's join, and its turns at the head: blocked on n01's key, then
	// on the holders, each woken once or twice.
	waited := cnt.Bytes() - before
	t.Logf("n02 read %d bytes to join, wait and take the slot", waited)
	if waited > lineListLimit+256<<10 {
		t.Errorf("the waiter read %d bytes to join, wait and take the slot", waited)
	}
}

// Any node's token may write the shared slot keys: keys there too large
// to read each count as a claim, so they never let a grant past K; the
// head names them and stalls until an operator removes them, and a K
// above their count still grants, on a slot number none of them has.
func TestSlotFloodCountsAndStallsWithReason(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	var keys []string
	for n := range 16 {
		keys = append(keys, SlotKey(testPrefix, n))
	}
	flood(t, c, keys, floodSize)
	bc, cnt := boundedClient(srv)
	for _, tt := range []struct {
		k     int
		grant bool
	}{{1, false}, {10, false}, {17, true}} {
		t.Run(fmt.Sprintf("K%d", tt.k), func(t *testing.T) {
			g := commit(t, c, fmt.Sprintf("slot-flood-%d", tt.k), tt.k)
			m, log := floodedSem(t, bc, "n01")
			ctx, cancel := context.WithTimeout(ctxFor(t, time.Minute), 3*time.Second)
			defer cancel()
			before := cnt.Bytes()
			h, err := m.Acquire(ctx, g)
			got := cnt.Bytes() - before
			t.Logf("read %d bytes", got)
			if got > lineListLimit+512<<10 {
				t.Errorf("read %d bytes", got)
			}
			if !tt.grant {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("granted past %d unread slot keys at K=%d: %v", len(keys), tt.k, err)
				}
				if !strings.Contains(log.String(), "each counts as a claim") {
					t.Errorf("the stall names no reason: %q", log.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = h.Release(ctxFor(t, 10*time.Second)) }()
			if h.slot.n != len(keys) {
				t.Errorf("granted slot %d, want %d: the lowest number no flooded key has", h.slot.n, len(keys))
			}
			p, _, err := c.KV().Get(keys[0], nil)
			if err != nil || p == nil || len(p.Value) != floodSize {
				t.Errorf("a flooded slot key was written over: %v", err)
			}
		})
	}
	t.Run("removed", func(t *testing.T) {
		if _, err := c.KV().DeleteTree(SlotsPrefix(testPrefix), nil); err != nil {
			t.Fatal(err)
		}
		g := commit(t, c, "slot-flood-removed", 1)
		m, _ := floodedSem(t, bc, "n01")
		h, err := m.Acquire(ctxFor(t, 10*time.Second), g)
		if err != nil {
			t.Fatalf("no grant once the flood is gone: %v", err)
		}
		_ = h.Release(ctxFor(t, 10*time.Second))
	})
}

// Never more than K, and every contender served, at each K, while a
// node's token floods its own keys: each contender reads through bounds
// (the monitor reads whole).
func TestStressUnderOwnFlood(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	// Holder keys are what the monitor lists on each change: a few of
	// them, and the rest of the flood in the contender folder.
	flood(t, c, ownFlood("n99", 2), floodSize)
	var more []string
	for range 12 {
		more = append(more, ContenderKey(testPrefix, "n99", fakeSession()))
	}
	flood(t, c, more, floodSize)
	bc, _ := boundedClient(srv)
	for _, k := range []int{1, 2, 3, 10} {
		for _, lease := range []time.Duration{0, time.Minute} {
			t.Run(fmt.Sprintf("K%d-lease%s", k, lease), func(t *testing.T) {
				g := commit(t, c, fmt.Sprintf("flood-stress-%d-%s", k, lease), k)
				g.Lease = lease
				stressVia(t, c, bc, g, max(20, 4*k))
			})
		}
	}
}

// A node's token bloats its own contender key while a waiter behind it
// watches it, and writes it again and again: the waiter takes it for gone
// (its place in line is lost, no one else's) instead of downloading each
// write, and the line still serves both, one at a time.
func TestWaiterBehindABloatedKey(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	g, ctx := commit(t, c, "bloated", 1), ctxFor(t, time.Minute)
	bc, cnt := boundedClient(srv)
	holder, bloated, waiter := newSem(t, bc, "n01"), newSem(t, bc, "n50"), newSem(t, bc, "n02")
	h, err := holder.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	first := acquireAsync(t, ctx, bloated, g)
	waitInLine(t, c, 1, "n50 in line")
	before := cnt.Bytes()
	second := acquireAsync(t, ctx, waiter, g)
	waitInLine(t, c, 2, "n02 in line")
	// n50's token writes its own key, which its session still locks.
	for i := range 8 {
		v := []byte(fmt.Sprintf(`{"name":"n50","state":"waiting","pad":"%d%s"}`, i, strings.Repeat("x", floodSize)))
		if _, err := c.KV().Put(&api.KVPair{Key: bloated.key, Value: v}, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var got []*Hold
	for range 2 {
		select {
		case h := <-first:
			got = append(got, h)
			first = nil
		case h := <-second:
			got = append(got, h)
			second = nil
		case <-time.After(15 * time.Second):
			t.Fatal("the line did not serve both waiters")
		}
		if got[len(got)-1] == nil {
			t.FailNow()
		}
		if err := got[len(got)-1].Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	read := cnt.Bytes() - before
	t.Logf("read %d bytes while n50's key was written 8 times", read)
	if read > 2*floodSize {
		t.Errorf("read %d bytes while n50's key was written 8 times", read)
	}
}

// A node's token writes so many keys with long names in its own folders
// that their names alone are over what a read lists at once: the names
// are listed folder by folder, its holder folder counts as it holding
// (against it alone: at K=2 the line still moves beside it), and reads
// stay bounded. (A read that lists the holder names at once finds that
// none can be locked, and counts no one for them: safe either way.)
func TestNamesFloodInOwnFolders(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	g, ctx := commit(t, c, "names-flood", 2), ctxFor(t, time.Minute)
	long := strings.Repeat("n", 400)
	var ops api.TxnOps
	for i := range 1600 {
		for _, key := range []string{HolderKey(testPrefix, "n99", fmt.Sprintf("%s-%d", long, i)), ContenderKey(testPrefix, "n99", fmt.Sprintf("%s-%d", long, i))} {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key}})
		}
		if len(ops) == 64 {
			if ok, _, _, err := c.Txn().Txn(ops, nil); err != nil || !ok {
				t.Fatalf("flood: ok=%v %v", ok, err)
			}
			ops = nil
		}
	}
	bc, cnt := boundedClient(srv)
	a, alog := floodedSem(t, bc, "n01")
	b, _ := floodedSem(t, bc, "n02")
	before := cnt.Bytes()
	h, err := a.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("n01 read %d bytes to join and take the slot", cnt.Bytes()-before)
	if !strings.Contains(alog.String(), "n99") || !strings.Contains(alog.String(), "counts as holding") {
		t.Errorf("the flood is not reported: %q", alog.String())
	}
	before = cnt.Bytes()
	waiter := acquireAsync(t, ctx, b, g)
	time.Sleep(time.Second)
	handOver(t, ctx, h, waiter, "n02 was not granted after n01 released")
	t.Logf("n02 read %d bytes to join, wait and take the slot", cnt.Bytes()-before)
	if got := cnt.Bytes() - before; got > namesLimit+lineListLimit+256<<10 {
		t.Errorf("n02 read %d bytes", got)
	}
}
