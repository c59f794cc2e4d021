package lockstep

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// A grant checks Gate.GrantChecks in its transaction: a waiter whose gate
// was computed before the key moved is refused with ErrGateStale once a
// slot frees, and takes nothing; a hold's fences do not check them.
func TestGrantChecksRefuseStaleGate(t *testing.T) {
	c, g, ctx := committed(t, "sha-gc", 1, time.Minute)
	const key = "rollagent/g/membership"
	put := func() uint64 {
		t.Helper()
		if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte(time.Now().String())}, nil); err != nil {
			t.Fatal(err)
		}
		p, _, err := c.KV().Get(key, nil)
		if err != nil || p == nil {
			t.Fatalf("read %s: %v", key, err)
		}
		return p.ModifyIndex
	}
	g.GrantChecks = api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: put()}}}
	holder, err := newSem(t, c, "holder").Acquire(ctx, g)
	if err != nil {
		t.Fatalf("a grant whose checks hold: %v", err)
	}
	errs := make(chan error, 1)
	go func() {
		h, err := newSem(t, c, "waiter").Acquire(ctx, g)
		if h != nil {
			_ = h.Release(ctx)
		}
		errs <- err
	}()
	waitInLine(t, c, 1, "the waiter in line")
	put()
	if _, err := holder.Fence(ctx); err != nil {
		t.Fatalf("a fence does not check GrantChecks: %v", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, ErrGateStale) {
			t.Fatalf("waiter: %v, want ErrGateStale", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter neither took the slot nor was refused")
	}
	h, err := ReadHolders(c, testPrefix, nil)
	if err != nil || len(h.Holding) != 0 {
		t.Fatalf("holders after the refusal: %+v, %v; want none", h, err)
	}
}
