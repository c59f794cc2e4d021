package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A promotion is an operator's act: with the shipped agent policy a node's
// token can neither write the promotion (by the CLI, by a raw put, or in a
// transaction that touches desired as the real one does) nor choose the
// canaries, and Consul writes nothing of such a try: the other nodes stay
// held. The operator's token promotes, and is refused under a CANCEL.
func TestAgentTokenCannotPromote(t *testing.T) {
	srv, c, root := aclRoot(t)
	k, _ := root.Keys("web")
	gs := canaryRollout(t, srv, root)
	other := "n1"
	if gs.Canaries.Has("n1") {
		other = "n2"
	}
	sha := gs.Desired.SHA
	agentToken := tokenForNode(t, c, "acl-policy.hcl", "web", other)
	agent := clientWith(t, srv.HTTPAddr, agentToken)
	before := kvSnapshot(t, c)
	promotion := []byte(`{"sha":"` + sha + `"}`)
	tries := map[string]func() error{
		"rollagent promote": func() error {
			if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+agentToken, "promote", "web"); code != 0 {
				return errorString(errs)
			}
			return nil
		},
		"put the promotion": func() error {
			_, err := agent.KV().Put(&api.KVPair{Key: k.Promoted(sha), Value: promotion}, nil)
			return err
		},
		"promote and touch desired": func() error {
			d := gs.DesiredPair
			return txnErr(agent.Txn().Txn(api.TxnOps{
				{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: d.Key, Value: d.Value, Flags: d.Flags + 1, Index: d.ModifyIndex}},
				{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Promoted(sha), Value: promotion}},
			}, nil))
		},
		"make itself the canary": func() error {
			_, err := agent.KV().Put(&api.KVPair{Key: k.Canaries(sha), Value: []byte(`{"sha":"` + sha + `","nodes":["` + other + `"]}`)}, nil)
			return err
		},
	}
	for name, try := range tries {
		t.Run(name, func(t *testing.T) {
			if err := try(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission denied") {
				t.Fatalf("%s with %s's token: %v; want permission denied", name, other, err)
			}
			kvUnchanged(t, c, before)
		})
	}
	held := func() coordinator.Verdict {
		g, err := root.ReadFor(t.Context(), "web", other)
		if err != nil {
			t.Fatal(err)
		}
		return g.Gate()
	}
	if v := held(); v.State != coordinator.GateAwaitingPromotion {
		t.Fatalf("%s's gate after the agent's tries: %s (%s), want awaiting_promotion", other, v.State, v.Reason)
	}
	op := tokenForNode(t, c, "acl-operator.hcl", "web", "n1")
	if code, out, errs := runCLI(t, srv.HTTPAddr, "--token="+op, "promote", "web", "--reason=canary looks fine"); code != 0 || !strings.Contains(out, "promoted") {
		t.Fatalf("promote with the operator's token: %d %s %s", code, out, errs)
	}
	if v := held(); !v.Open {
		t.Fatalf("%s's gate after the operator's promotion: %s (%s), want open", other, v.State, v.Reason)
	}
	log, err := root.Events(t.Context(), "web")
	if err != nil {
		t.Fatal(err)
	}
	promoted := false
	for _, e := range log.Events {
		promoted = promoted || (e.Kind == coordinator.EventPromote && e.SHA == sha && e.Reason == "canary looks fine")
	}
	if !promoted {
		t.Errorf("no promote event in the log: %+v", log.Events)
	}
}

// canaryRollout commits testdata/canary.json to web as root, after records
// of n1 and n2 so that it picks one of them as its canary, and returns the
// group as it reads then.
func canaryRollout(t *testing.T, srv *consultest.Server, root *coordinator.Store) *coordinator.GroupState {
	t.Helper()
	k, _ := root.Keys("web")
	for _, n := range []string{"n1", "n2"} {
		rec := coordinator.NodeState{Node: n, State: coordinator.StateConverged, Since: time.Now().UTC()}
		if _, err := srv.Client().KV().Put(&api.KVPair{Key: k.Node(n), Value: asJSON(t, rec)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+rootToken, "commit", "web", "-f", "testdata/canary.json"); code != 0 {
		t.Fatal(errs)
	}
	gs, err := root.Read(t.Context(), "web", nil)
	if err != nil || gs.Canaries == nil || len(gs.Canaries.Nodes) != 1 {
		t.Fatalf("canaries after the commit: %+v, %v", gs.Canaries, err)
	}
	return gs
}

func asJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// errorString is an error of a CLI's stderr.
type errorString string

func (e errorString) Error() string { return string(e) }
