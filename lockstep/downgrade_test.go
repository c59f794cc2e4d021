package lockstep

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// lockOlderHolder makes an older process of name: a session that locks
// its holder key, as an older agent's grant or reclaim does.
func lockOlderHolder(t *testing.T, c *api.Client, name string) *Session {
	t.Helper()
	old := newSession(t, c)
	hk := HolderKey(testPrefix, name, old.ID())
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: hk, Value: []byte(`{"name":"` + name + `","state":"holding"}`), Session: old.ID()}, nil); err != nil || !ok {
		t.Fatalf("lock %s: %v %v", hk, ok, err)
	}
	return old
}

// A process of this version of n1 dies mid-step; its agent is
// downgraded, and the older process reclaims n1's claim from the record's
// copy. A grant of this version to n2 must keep the older process's
// claim in the record, not put back the dead grant of the slot key: a
// head that marks that one lost would otherwise leave n1, down under the
// older process when it dies too, counted by no one.
func TestAGrantKeepsAnOlderReclaimOfTheRecord(t *testing.T) {
	c, g, ctx := committed(t, "sha-downgrade-reclaim", 2, time.Minute)
	g.Lease = 2 * time.Second
	deadHolder(t, ctx, c, g, "n1")
	old := lockOlderHolder(t, c, "n1")
	now := time.Now().UTC()
	olderWrite(t, c, func(r *olderRecord) {
		r.Claims["n1"] = olderClaim{Session: old.ID(), Since: now, Until: now.Add(time.Hour), Note: "older"}
		r.Holders[old.ID()] = Entry{Name: "n1", State: "holding", Since: now}
	})
	h2, err := newSem(t, c, "n2").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if cl := recordClaims(t, c)["n1"]; cl.Session != old.ID() {
		t.Fatalf("n2's grant replaced the older process's claim of n1 in the record with %+v", cl)
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A head at K = 1 sees n1 counted by a live holder: nothing to judge.
	g1 := g
	g1.Limit = 1
	wctx, cancel := context.WithTimeout(ctx, 3*g.Lease)
	defer cancel()
	n3 := newSem(t, c, "n3")
	var lost *LostError
	if _, err := n3.Acquire(wctx, g1); errors.As(err, &lost) {
		if err := n3.MarkLost(ctx, lost.Name, lost.Claim); err != nil {
			t.Fatal(err)
		}
	} else if err == nil {
		t.Fatal("n3 was granted past n1's live claim at K = 1")
	}
	endSession(t, old) // the older process dies mid-step
	eventually(t, 10*time.Second, "older holder key gone", func() bool {
		h, err := ReadHolders(c, testPrefix, nil)
		return err == nil && len(h.Holding) == 0
	})
	o, n := views(t, c)
	if !slices.Contains(o, "n1") || !slices.Contains(n, "n1") {
		t.Errorf("n1, down mid-step under its older process, counts for older agents %v, for this version %v; want both", o, n)
	}
}

// An older head marks lost the record's copy of a dead grant of this
// version; a write of the record by this version copies the mark into
// the slot key, so that an older process of the name that takes the
// record's claim and releases it does not leave the slot key's grant
// counting again.
func TestAnOlderLostMarkReachesTheSlotKey(t *testing.T) {
	c, g, ctx := committed(t, "sha-downgrade-mark", 2, time.Minute)
	g.Lease = time.Minute
	deadHolder(t, ctx, c, g, "n1")
	olderWrite(t, c, func(r *olderRecord) { // an older head's lost mark
		cl := r.Claims["n1"]
		cl.Lost = true
		r.Claims["n1"] = cl
		r.Released++
	})
	h2, err := newSem(t, c, "n2").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	olderWrite(t, c, func(r *olderRecord) { // an older process of n1 reclaims
		r.Claims["n1"] = olderClaim{Session: "older-s", Since: now, Until: now.Add(time.Hour)}
	})
	olderWrite(t, c, func(r *olderRecord) { // and releases
		delete(r.Claims, "n1")
		r.Released++
	})
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if o, n := views(t, c); slices.Contains(n, "n1") {
		t.Errorf("n1's lost grant counts again for this version %v (older agents %v)", n, o)
	}
}
