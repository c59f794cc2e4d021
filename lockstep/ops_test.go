package lockstep

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

func setOp(key, value string) *api.TxnOp {
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: []byte(value)}}
}

// The grant carries the first step's writes: they are not written while the
// contender waits, and are written by the very transaction that grants.
func TestAcquireWritesOpsInTheGrant(t *testing.T) {
	c, g, ctx := committed(t, "ops", 1, 30*time.Second)
	first, err := newSem(t, c, "first").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	w := newSem(t, c, "second")
	got := acquireAsync(t, ctx, w, g, setOp("rollagent/g/step", "second"))
	waitInLine(t, c, 1, "the second in line")
	if p, _, err := c.KV().Get("rollagent/g/step", nil); err != nil || p != nil {
		t.Fatalf("the step's write landed while its contender waited: %+v, %v", p, err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h == nil {
		t.FailNow()
	}
	step, _, err := c.KV().Get("rollagent/g/step", nil)
	if err != nil || step == nil || string(step.Value) != "second" {
		t.Fatalf("the step's write is missing after the grant: %+v, %v", step, err)
	}
	hk, _, err := c.KV().Get(w.hkey, nil)
	if err != nil || hk == nil || hk.ModifyIndex != step.ModifyIndex {
		t.Fatalf("the step's write (index %d) is not in the grant's transaction (holder key %+v, %v)", step.ModifyIndex, hk, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A caller's op that Consul refuses fails the grant as a whole: nothing is
// written, the caller is out of line, and it can contend again.
func TestAcquireWithARefusedOpGrantsNothing(t *testing.T) {
	c, g, ctx := committed(t, "badop", 1, 30*time.Second)
	m := newSem(t, c, "m")
	bad := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: "rollagent/g/step", Value: []byte("x"), Index: 12345}}
	_, err := m.Acquire(ctx, g, setOp("rollagent/g/other", "x"), bad)
	var te *TxnError
	if !errors.As(err, &te) || te.Op != 1 {
		t.Fatalf("Acquire with a refused op: %v, want a *TxnError for op 1", err)
	}
	pairs, _, err := c.KV().List("rollagent/g/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		// The line's tail names whoever joined last, whatever came of it.
		if p.Key != g.DesiredKey && p.Key != m.opts.Prefix+tailKey {
			t.Errorf("%s was written by a grant that failed", p.Key)
		}
	}
	h, err := m.Acquire(ctx, g)
	if err != nil {
		t.Fatalf("contending again: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Release carries the last step's record; a refused op leaves the slot
// held, and a plain Release then frees it.
func TestReleaseWritesOps(t *testing.T) {
	c, g, ctx := committed(t, "relops", 1, 30*time.Second)
	m := newSem(t, c, "m")
	h, err := m.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	bad := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: "rollagent/g/done", Value: []byte("x"), Index: 12345}}
	var te *TxnError
	if err := h.Release(ctx, bad); !errors.As(err, &te) || te.Op != 0 {
		t.Fatalf("Release with a refused op: %v, want a *TxnError for op 0", err)
	}
	if _, err := h.Fence(ctx); err != nil {
		t.Fatalf("the slot is not held after a refused release: %v", err)
	}
	if err := h.Release(ctx, setOp("rollagent/g/done", "m")); err != nil {
		t.Fatal(err)
	}
	done, _, err := c.KV().Get("rollagent/g/done", nil)
	if err != nil || done == nil {
		t.Fatalf("the release's write is missing: %+v, %v", done, err)
	}
	hs, err := ReadHolders(c, testPrefix, nil)
	if err != nil || len(hs.Holding) != 0 {
		t.Fatalf("still holding after the release: %+v, %v", hs, err)
	}
	if p, _, err := c.KV().Get(m.hkey, nil); err != nil || p != nil {
		t.Fatalf("holder key left after the release: %+v, %v", p, err)
	}
}

// Join writes go in with the contender key, before the wait: visible while
// the contender waits, before any grant. A refused join op puts no one in
// line and writes nothing.
func TestAcquireWithJoinWrites(t *testing.T) {
	c, g, ctx := committed(t, "join", 1, 30*time.Second)
	first, err := newSem(t, c, "first").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	w := newSem(t, c, "second")
	bad := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: "rollagent/g/joined", Value: []byte("x"), Index: 12345}}
	var te *TxnError
	if _, err := w.AcquireWith(ctx, g, Writes{Join: api.TxnOps{setOp("rollagent/g/other", "x"), bad}}); !errors.As(err, &te) || te.Op != 1 {
		t.Fatalf("AcquireWith a refused join op: %v, want a *TxnError for op 1", err)
	}
	if h, err := ReadHolders(c, testPrefix, nil); err != nil || len(h.Waiting) != 0 {
		t.Fatalf("in line after a refused join: %+v, %v", h, err)
	}
	if p, _, err := c.KV().Get("rollagent/g/other", nil); err != nil || p != nil {
		t.Fatalf("a refused join wrote its other op: %+v, %v", p, err)
	}
	got := make(chan *Hold, 1)
	go func() {
		h, err := w.AcquireWith(ctx, g, Writes{Join: api.TxnOps{setOp("rollagent/g/joined", "waiting")},
			Grant: func() api.TxnOps { return api.TxnOps{setOp("rollagent/g/joined", "holding")} }})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	eventually(t, 10*time.Second, "the join write while in line", func() bool {
		p, _, err := c.KV().Get("rollagent/g/joined", nil)
		return err == nil && p != nil && string(p.Value) == "waiting"
	})
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h == nil {
		t.Fatal("no hold")
	}
	if p, _, err := c.KV().Get("rollagent/g/joined", nil); err != nil || p == nil || string(p.Value) != "holding" {
		t.Fatalf("after the grant: %+v, %v", p, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
