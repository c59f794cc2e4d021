package lockstep

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// Issue 20: a grant that Consul applied but whose reply was lost, then a
// CANCEL before the contender tried again. AcquireWith returned the
// CANCEL and removed its contender key, but the holder key stayed locked
// by its session, which lives as long as its process: at K = 1 the next
// commit waited behind it for good. No slot may stay once AcquireWith
// returns, with a lease (as the agent takes it) or without: its caller
// began no step under the grant, and a claim left to its lease would keep
// the slot from everyone, then be reported as a node lost mid-step.
func TestLostGrantReplyThenCancelLeavesNoSlot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lease time.Duration
	}{
		{"with a lease", time.Minute},
		{"without a lease", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := consultest.NewDev(t)
			c := srv.Client()
			g := commit(t, c, "sha-lost-grant", 1)
			g.Lease = tc.lease
			fc, faults := srv.FaultyClient()
			m, err := New(fc, newSession(t, fc), Options{Prefix: testPrefix, Name: "n1"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxFor(t, 30*time.Second)
			lost := loseGrantReply(t, c, faults, m, g)
			_, err = m.AcquireWith(ctx, g, Writes{Note: "sha-lost-grant"})
			if !errors.Is(err, ErrCancelled) {
				t.Fatalf("AcquireWith = %v, want the CANCEL", err)
			}
			if e := <-lost; e != nil {
				t.Fatal(e)
			}
			noSlotLeft(t, c, m)
			// The slot is free: the next commit's first contender is
			// granted at K = 1 without waiting on the lost grant.
			h, err := newSem(t, c, "n2").Acquire(ctxFor(t, 10*time.Second), commit(t, c, "sha-next", 1))
			if err != nil {
				t.Fatalf("the next commit's contender: %v", err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// loseGrantReply arms faults to lose the reply to m's grant once Consul has
// applied it, and to close g right then, as `rollagent cancel` does. The
// reply is held back until m's watch of the gate has had ample time to see
// the CANCEL (one blocking query woken by its write), so that the CANCEL
// ends the wait before the lost grant is tried again: the timing.
// The channel gets the grant's fate: nil, or what went wrong.
func loseGrantReply(t *testing.T, c *api.Client, faults *consultest.Faults, m *Semaphore, g Gate) <-chan error {
	t.Helper()
	fired := make(chan error, 1)
	faults.OnTxn(func(ops api.TxnOps) bool {
		// Only the grant locks our holder key behind the gate's checks: a
		// reclaim checks no gate, and neither a join nor a fence locks it.
		return consultest.TxnHas(ops, api.KVLock, m.hkey) && consultest.TxnHas(ops, api.KVCheckIndex, g.DesiredKey)
	}, func() error {
		p, _, err := c.KV().Get(g.DesiredKey, nil)
		if err == nil {
			_, _, _, err = c.Txn().Txn(CloseOps(p, g.Closed[0], []byte(`{"reason":"test"}`)), nil)
		}
		fired <- err
		time.Sleep(time.Second)
		return consultest.ErrReplyLost
	})
	return fired
}

// noSlotLeft fails unless m holds nothing in Consul's own KV: no holder
// key or contender key of its session, and neither a holder nor a claim
// of its in the holders record.
func noSlotLeft(t *testing.T, c *api.Client, m *Semaphore) {
	t.Helper()
	pairs, _, err := c.KV().List(testPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if p.Key == m.hkey || p.Key == m.key || p.Session == m.s.ID() {
			t.Errorf("left behind: %s (session %q) = %s", p.Key, p.Session, p.Value)
		}
	}
	hs := ParseHolders(testPrefix, pairs)
	if _, ok := hs.ClaimOf(m.opts.Name); ok || hs.Live(m.s.ID()) || len(hs.Counted()) != 0 {
		t.Errorf("the slot is still taken: holding %v, claims %v", hs.Holding, hs.Claims)
	}
}
