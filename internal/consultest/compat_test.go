package consultest

// These tests pin the behaviour of the consul/api calls rollagent relies on
// against the Consul server it is built and tested with. If one fails after
// a version bump, lockstep's safety argument needs another look.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

func TestKVCAS(t *testing.T) {
	kv := NewDev(t).Client().KV()
	ok, _, err := kv.CAS(&api.KVPair{Key: "k", Value: []byte("a"), ModifyIndex: 0}, nil)
	if err != nil || !ok {
		t.Fatalf("create-if-absent CAS: ok=%v err=%v", ok, err)
	}
	ok, _, err = kv.CAS(&api.KVPair{Key: "k", Value: []byte("b"), ModifyIndex: 0}, nil)
	if err != nil || ok {
		t.Fatalf("second create-if-absent CAS must fail: ok=%v err=%v", ok, err)
	}
	p, _, err := kv.Get("k", nil)
	if err != nil || p == nil {
		t.Fatalf("get: %v", err)
	}
	tests := []struct {
		name  string
		index uint64
		want  bool
	}{
		{"stale index", p.ModifyIndex - 1, false},
		{"current index", p.ModifyIndex, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, _, err := kv.CAS(&api.KVPair{Key: "k", Value: []byte("c"), ModifyIndex: tc.index}, nil)
			if err != nil || ok != tc.want {
				t.Fatalf("CAS at %d: ok=%v want %v err=%v", tc.index, ok, tc.want, err)
			}
		})
	}
}

func TestBlockingQueryWakesOnChange(t *testing.T) {
	kv := NewDev(t).Client().KV()
	if _, err := kv.Put(&api.KVPair{Key: "w", Value: []byte("1")}, nil); err != nil {
		t.Fatal(err)
	}
	_, meta, err := kv.Get("w", nil)
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan *api.KVPair, 1)
	go func() {
		p, _, _ := kv.Get("w", &api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 30 * time.Second})
		woke <- p
	}()
	select {
	case <-woke:
		t.Fatal("blocking query returned before any change")
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := kv.Put(&api.KVPair{Key: "w", Value: []byte("2")}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-woke:
		if p == nil || string(p.Value) != "2" {
			t.Fatalf("woke with %+v, want value 2", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocking query did not wake on change")
	}
}

func TestBlockingQueryHonoursContext(t *testing.T) {
	kv := NewDev(t).Client().KV()
	_, meta, err := kv.Get("absent", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	q := (&api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: time.Minute}).WithContext(ctx)
	_, _, err = kv.Get("absent", q)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocking query ended with %v, want the context's deadline", err)
	}
}

func TestSessionLockAndTxnChecks(t *testing.T) {
	c := NewDev(t).Client()
	sid, _, err := c.Session().Create(&api.SessionEntry{Behavior: api.SessionBehaviorDelete, LockDelay: time.Nanosecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok, _, err := c.KV().Acquire(&api.KVPair{Key: "lock", Value: []byte("x"), Session: sid}, nil)
	if err != nil || !ok {
		t.Fatalf("acquire: ok=%v err=%v", ok, err)
	}
	gate, _, err := c.KV().Get("lock", nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		ops  api.TxnOps
		want bool
	}{
		{"check-session holds", api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: "lock", Session: sid}}}, true},
		{"check-session other", api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: "lock", Session: "00000000-0000-0000-0000-000000000000"}}}, false},
		{"check-index current", api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: "lock", Index: gate.ModifyIndex}}}, true},
		{"check-index stale", api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: "lock", Index: gate.ModifyIndex - 1}}}, false},
		{"check-not-exists absent", api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: "cancel/x"}}}, true},
		{"check-not-exists present", api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: "lock"}}}, false},
		{"failed check writes nothing", api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "side-effect", Value: []byte("1")}},
			{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: "lock"}},
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, resp, _, err := c.Txn().Txn(tc.ops, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.want {
				t.Fatalf("txn ok=%v want %v (errors %+v)", ok, tc.want, resp.Errors)
			}
		})
	}
	if p, _, _ := c.KV().Get("side-effect", nil); p != nil {
		t.Fatal("a failed txn wrote a key")
	}
	if _, err := c.Session().Destroy(sid, nil); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := c.KV().Get("lock", nil); p != nil {
		t.Fatal("behavior=delete: key must go with its session")
	}
}

// lockstep marks a holder by rewriting its own locked key in a txn; the
// lock must survive that write, or fencing would silently stop working.
func TestTxnLockRewriteKeepsSession(t *testing.T) {
	c := NewDev(t).Client()
	sid, _, err := c.Session().Create(&api.SessionEntry{Behavior: api.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"waiting", "holding"} {
		ok, resp, _, err := c.Txn().Txn(api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVLock, Key: "c/" + sid, Value: []byte(v), Session: sid}}}, nil)
		if err != nil || !ok {
			t.Fatalf("lock %s: ok=%v err=%v resp=%+v", v, ok, err, resp)
		}
	}
	p, _, err := c.KV().Get("c/"+sid, nil)
	if err != nil || p == nil {
		t.Fatalf("get: %v", err)
	}
	if p.Session != sid || string(p.Value) != "holding" {
		t.Fatalf("got session %q value %q", p.Session, p.Value)
	}
}

func TestServiceTTLCheckBoundSession(t *testing.T) {
	srv := NewDev(t)
	c := srv.Client()
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: "svc-1", Name: "svc", Tags: []string{"sha:abc"}, Meta: map[string]string{"state": "converged"},
		Check: &api.AgentServiceCheck{CheckID: "svc-1:ttl", TTL: "3s", Status: api.HealthPassing},
	})
	if err != nil {
		t.Fatal(err)
	}
	sid, _, err := c.Session().Create(&api.SessionEntry{
		Behavior: api.SessionBehaviorDelete, LockDelay: time.Nanosecond,
		NodeChecks: []string{"serfHealth"}, ServiceChecks: []api.ServiceCheck{{ID: "svc-1:ttl"}},
	}, nil)
	if err != nil {
		t.Fatalf("session bound to serfHealth and a service TTL check: %v", err)
	}
	last := time.Now()
	if err := c.Agent().UpdateTTL("svc-1:ttl", "ok", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		e, _, err := c.Session().Info(sid, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e == nil {
			t.Logf("session ended %s after the last TTL pass", time.Since(last).Round(10*time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("session outlived its TTL check by 20s")
}
