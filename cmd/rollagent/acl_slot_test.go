package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// The agent's policy lets it write the slot's keys that lockstep writes
// for its own node, and no other key under slot/: neither a key no reader
// would expect there, nor a contender or holder key of another node's.
func TestAgentTokenWritesOnlyTheSlotKeys(t *testing.T) {
	srv, c := aclRollout(t, "web")
	agentKV := clientWith(t, srv.HTTPAddr, tokenForNode(t, c, "acl-policy.hcl", "web", "n1")).KV()
	slot := groupkit.Keys(t, "web").Slot()
	for _, tc := range []struct {
		key     string
		allowed bool
	}{
		{slot + ".holders", true},
		{slot + ".tail", true},
		{slot + ".holders/n1/some-session", true},
		{slot + ".holders/.slots/0", true},
		{slot + "c/n1/some-session", true},
		{slot + ".holders/x", false},
		{slot + "c/x", false},
		{slot + ".holders/some-session", false},
		{slot + "c/some-session", false},
		{slot + ".holders/n2/some-session", false},
		{slot + "c/n2/some-session", false},
		{slot + "c/n10/some-session", false},
		{slot + "c/n1", false},
		{slot + "junk", false},
		{slot + ".holdersjunk", false},
		{slot + ".tailjunk", false},
		{slot + "x/y", false},
	} {
		t.Run(strings.TrimPrefix(tc.key, slot), func(t *testing.T) {
			_, err := agentKV.Put(&api.KVPair{Key: tc.key, Value: []byte(`{}`)}, nil)
			denied := err != nil && strings.Contains(strings.ToLower(err.Error()), "permission denied")
			switch {
			case tc.allowed && err != nil:
				t.Fatalf("the agent's token may not write %s: %v", tc.key, err)
			case !tc.allowed && !denied:
				t.Fatalf("the agent's token wrote %s: %v", tc.key, err)
			}
			if p, _, _ := c.KV().Get(tc.key, nil); !tc.allowed && p != nil {
				t.Fatalf("%s exists", tc.key)
			}
		})
	}
}

// With the shipped policy, each node's token takes and releases its slot
// through lockstep, one node after the other at max_parallel 1, and n1's
// token cannot contend in n2's name: its join is refused and leaves
// nothing under slot/ but the line's tail (and the freed slot key).
func TestAgentTokenTakesOnlyItsOwnSlot(t *testing.T) {
	srv := aclConsul(t)
	c := srv.Client()
	if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+rootToken, "commit", "web", "-f", "testdata/web.json"); code != 0 {
		t.Fatal(errs)
	}
	ctx := testkit.Context(t, time.Minute)
	st := coordinator.NewStore(c, "")
	k, _ := st.Keys("web")
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	g := gs.LockGate(k)
	g.Lease = time.Minute
	clients := map[string]*api.Client{}
	for _, node := range []string{"n1", "n2"} {
		clients[node] = clientWith(t, srv.HTTPAddr, tokenForNode(t, c, "acl-policy.hcl", "web", node))
	}
	sem := func(node, as string) *lockstep.Semaphore {
		tc := clients[node]
		s, err := lockstep.NewSession(ctx, c, lockstep.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		m, err := lockstep.New(tc, s, lockstep.Options{Prefix: k.Slot(), Name: as})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, node := range []string{"n1", "n2"} {
		t.Run(node+" takes and releases its slot", func(t *testing.T) {
			h, err := sem(node, node).Acquire(ctx, g)
			if err != nil {
				t.Fatalf("%s's token cannot take its slot: %v", node, err)
			}
			if _, err := h.Fence(ctx); err != nil {
				t.Fatalf("%s's token cannot fence: %v", node, err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatalf("%s's token cannot release its slot: %v", node, err)
			}
		})
	}
	t.Run("n1 contends as n2", func(t *testing.T) {
		_, err := sem("n1", "n2").Acquire(ctx, g)
		var te *lockstep.TxnError
		if !errors.As(err, &te) || !strings.Contains(strings.ToLower(te.What), "permission denied") {
			t.Fatalf("n1's token contended in n2's name: %v", err)
		}
		ks, _, err := c.KV().Keys(k.Slot(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range ks {
			// A freed slot key stays, with its count of releases.
			free := lockstep.ClassifyKey(strings.TrimPrefix(key, k.Slot())) == lockstep.KeySlot
			if key != lockstep.HoldersKey(k.Slot()) && key != k.Slot()+".tail" && !free {
				t.Errorf("%s is left under slot/", key)
			}
		}
		if h, err := lockstep.ReadHolders(c, k.Slot(), nil); err != nil || len(h.Counted()) != 0 {
			t.Errorf("after both released and n1's refused join: %v counted (%v)", h.Counted(), err)
		}
	})
}

// Write includes delete, so the same rules keep a node's token off another
// node's slot keys that exist: n1's token can delete neither n2's holder
// key nor its contender key, one by one, by prefix, in a transaction, nor
// the whole slot, and Consul keeps nothing of any try. n2's own token
// wrote them, and deletes them.
func TestAgentTokenCannotDeleteAnotherNodesSlotKeys(t *testing.T) {
	srv, c := aclRollout(t, "web")
	slot := groupkit.Keys(t, "web").Slot()
	n2 := clientWith(t, srv.HTTPAddr, tokenForNode(t, c, "acl-policy.hcl", "web", "n2")).KV()
	holder, contender := lockstep.HolderKey(slot, "n2", "s2"), lockstep.ContenderKey(slot, "n2", "s2")
	for _, key := range []string{holder, contender} {
		if _, err := n2.Put(&api.KVPair{Key: key, Value: []byte(`{}`)}, nil); err != nil {
			t.Fatalf("n2's token may not write its own %s: %v", key, err)
		}
	}
	n1 := clientWith(t, srv.HTTPAddr, tokenForNode(t, c, "acl-policy.hcl", "web", "n1"))
	del := func(key string) func() error {
		return func() error { _, err := n1.KV().Delete(key, nil); return err }
	}
	delTree := func(prefix string) func() error {
		return func() error { _, err := n1.KV().DeleteTree(prefix, nil); return err }
	}
	deniedTries(t, c, "n1's token", map[string]func() error{
		"delete n2's holder key":               del(holder),
		"delete n2's contender key":            del(contender),
		"delete n2's holder keys by prefix":    delTree(lockstep.HolderKey(slot, "n2", "")),
		"delete n2's contender keys by prefix": delTree(lockstep.ContenderKey(slot, "n2", "")),
		"delete the whole slot":                delTree(slot),
		"delete both in a transaction": func() error {
			return txnErr(n1.Txn().Txn(api.TxnOps{
				{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: holder}},
				{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: contender}},
			}, nil))
		},
	})
	for _, key := range []string{holder, contender} {
		if _, err := n2.Delete(key, nil); err != nil {
			t.Errorf("n2's token may not delete its own %s: %v", key, err)
		}
	}
}
