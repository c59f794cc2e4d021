package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// agentKeys are the keys of group that the shipped agent policy of node n1
// lets it write in its own group, one of each kind.
func agentKeys(t *testing.T, group, sha string) []string {
	t.Helper()
	k := groupkit.Keys(t, group)
	s := k.Slot()
	return []string{k.Desired(), k.Node("n1"), k.Stopped("n1"), k.DownCheck(), s + ".holders", s + ".tail",
		s + ".holders/.slots/0", s + ".holders/n1/s1", s + "c/n1/s1", k.Failure(sha, "n1"), k.FailCount(sha),
		k.Pause(sha), k.Deadline(sha), k.NodeEvents("n1") + "1-a-0"}
}

// operatorKeys are the keys of group that only an operator's token writes,
// one of each kind.
func operatorKeys(t *testing.T, group, sha string) []string {
	t.Helper()
	k := groupkit.Keys(t, group)
	return []string{k.History(sha), k.Cancel(sha), k.OperatorPause(), k.Canaries(sha), k.Promoted(sha),
		k.Converged(sha), k.Removed("n2"), k.Membership(), k.OperatorEvents() + "1-a-0"}
}

// putTries are puts of each key through kv, named "put <key>".
func putTries(kv *api.KV, keys []string) map[string]func() error {
	tries := map[string]func() error{}
	for _, key := range keys {
		tries["put "+key] = func() error {
			_, err := kv.Put(&api.KVPair{Key: key, Value: []byte("{}")}, nil)
			return err
		}
	}
	return tries
}

// A node's token, made from the shipped agent policy for group web, writes
// nothing of another group: not the keys it may write in its own (its
// record, the slot, a failure, a failure pause, its events, desired), not
// by deleting api's failure pause, and no command of the CLI. Consul keeps
// nothing of any try. The same raw writes in its own group go through, so
// the refusals are about the group.
func TestAgentTokenCannotTouchAnotherGroup(t *testing.T) {
	srv, c := aclRollout(t, "web")
	rolloutOf(t, srv, "api")
	root := coordinator.NewStore(c, "")
	api0, err := root.Read(t.Context(), "api", nil)
	if err != nil {
		t.Fatal(err)
	}
	k := groupkit.Keys(t, "api")
	sha := api0.Desired.SHA
	n1 := tokenForNode(t, c, "acl-policy.hcl", "web", "n1")
	agent := clientWith(t, srv.HTTPAddr, n1)
	agentStore := coordinator.NewStore(agent, "")
	tries := map[string]func() error{
		"record a failure": func() error {
			_, err := agentStore.RecordFailure(t.Context(), "api", "n1", sha, "unhealthy")
			return err
		},
		"write its node's record": func() error {
			return agentStore.PutNode(t.Context(), "api", coordinator.NodeState{Node: "n1", State: coordinator.StateConverged, Since: time.Now().UTC()})
		},
		"delete the failure pause": func() error {
			_, err := agent.KV().Delete(k.Pause(sha), nil)
			return err
		},
		"delete the failure pause and touch desired": func() error {
			d := api0.DesiredPair
			return txnErr(agent.Txn().Txn(api.TxnOps{
				{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: d.Key, Value: d.Value, Flags: d.Flags + 1, Index: d.ModifyIndex}},
				{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.Pause(sha)}},
			}, nil))
		},
	}
	for _, key := range agentKeys(t, "api", sha) {
		tries["put "+key] = func() error {
			_, err := agent.KV().Put(&api.KVPair{Key: key, Value: []byte("{}")}, nil)
			return err
		}
	}
	for name, try := range tries {
		t.Run(name, func(t *testing.T) {
			before := kvSnapshot(t, c)
			if err := try(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission denied") {
				t.Fatalf("%s in api with web's n1 token: %v; want permission denied", name, err)
			}
			kvUnchanged(t, c, before)
		})
	}
	for cmd, args := range writes(t, "api") {
		t.Run("rollagent "+cmd, func(t *testing.T) {
			refused(t, srv, "ermission denied", append([]string{"--token=" + n1}, args...)...)
		})
	}
	// Nor may it read api: its policy reads its own group and those its
	// specs wait on alone.
	t.Run("rollagent status", func(t *testing.T) {
		errs := refused(t, srv, "ermission denied", "--token="+n1, "status", "api")
		t.Logf("refused: %s", strings.TrimSpace(errs))
	})
	web, err := root.Read(t.Context(), "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range agentKeys(t, "web", web.Desired.SHA) {
		if _, err := agent.KV().Put(&api.KVPair{Key: key, Value: []byte("{}")}, nil); err != nil {
			t.Errorf("put %s in its own group: %v", key, err)
		}
	}
}

// converged/ is the operator's: a commit writes it after reading the whole
// group, and a record there newer than a SHA's canaries/ lets an automatic
// rollback to that SHA skip its canaries. With the shipped agent policy a
// node's token can neither write one (new, rewritten newer, or in a
// transaction that touches desired as a commit does) nor delete one, and
// Consul keeps nothing of any try.
func TestAgentTokenCannotWriteConverged(t *testing.T) {
	srv, c := aclRollout(t, "web")
	gs, err := coordinator.NewStore(c, "").Read(t.Context(), "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	k := groupkit.Keys(t, "web")
	sha, prev := gs.Desired.SHA, gs.Desired.Previous
	old, _, err := c.KV().Get(k.Converged(prev), nil)
	if err != nil || old == nil {
		t.Fatalf("rolloutOf's converged record of %s: %v, %v", prev, old, err)
	}
	agent := clientWith(t, srv.HTTPAddr, tokenForNode(t, c, "acl-policy.hcl", "web", "n1"))
	now := asJSON(t, coordinator.Converged{SHA: sha, At: time.Now().UTC(), Nodes: 1})
	tries := map[string]func() error{
		"put the desired SHA's": func() error {
			_, err := agent.KV().Put(&api.KVPair{Key: k.Converged(sha), Value: now}, nil)
			return err
		},
		"rewrite an older one newer": func() error {
			v := asJSON(t, coordinator.Converged{SHA: prev, At: time.Now().UTC(), Nodes: 1})
			_, _, err := agent.KV().CAS(&api.KVPair{Key: old.Key, Value: v, ModifyIndex: old.ModifyIndex}, nil)
			return err
		},
		"delete one": func() error {
			_, err := agent.KV().Delete(old.Key, nil)
			return err
		},
		"delete them all": func() error {
			_, err := agent.KV().DeleteTree(k.Converged(""), nil)
			return err
		},
		"put one and touch desired": func() error {
			d := gs.DesiredPair
			return txnErr(agent.Txn().Txn(api.TxnOps{
				{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: d.Key, Value: d.Value, Flags: d.Flags + 1, Index: d.ModifyIndex}},
				{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Converged(sha), Value: now}},
			}, nil))
		},
	}
	for name, try := range tries {
		t.Run(name, func(t *testing.T) {
			before := kvSnapshot(t, c)
			if err := try(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission denied") {
				t.Fatalf("%s with n1's token: %v; want permission denied", name, err)
			}
			kvUnchanged(t, c, before)
		})
	}
}
