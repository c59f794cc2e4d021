package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
)

// The shipped policies read what update.after and update.last are judged
// on: the operator's commit reads the named group (to refuse a cycle), the
// agent's look and status read its progress, and the agent reads the
// leader check and its group's records; a token without the named group's
// rule holds the rollout and says why.
func TestTokensReadWhatTheOrderIsJudgedOn(t *testing.T) {
	srv, c, root := aclRoot(t)
	ctx := testkit.Context(t, time.Minute)
	mres, err := root.Commit(ctx, "managers", jsonSpec(t, `{"container":{"image":"demo:v1"}}`), "op", "managers")
	if err != nil {
		t.Fatal(err)
	}
	put := func(group, node, consulNode, sha string, state coordinator.NodeStatus, desired string) {
		t.Helper()
		n := coordinator.NodeState{Node: node, ConsulNode: consulNode, SHA: sha, Desired: desired, State: state, Since: time.Now()}
		if err := root.PutNode(ctx, group, n); err != nil {
			t.Fatal(err)
		}
	}
	put("managers", "m1", "", mres.SHA, coordinator.StateConverged, mres.SHA)
	if err := c.Agent().CheckRegister(&api.AgentCheckRegistration{ID: "raft-leader", Name: "raft-leader",
		AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: api.HealthPassing}}); err != nil {
		t.Fatal(err)
	}
	spec := jsonSpec(t, `{"container":{"image":"demo:v2"},"update":{"after":["managers"],"last":{"check":"raft-leader"}}}`)
	k, _ := coordinator.NewKeys("", "web")
	webOnly := tokenWith(t, c, "web-only", fmt.Sprintf("key_prefix %q { policy = \"write\" }", k.Root()))
	if _, err := storeWith(t, srv.HTTPAddr, webOnly).Commit(ctx, "web", spec, "op", "order"); err == nil ||
		!strings.Contains(err.Error(), "cannot read group managers to check for a cycle") {
		t.Fatalf("commit with a token that may not read managers: %v, want refused", err)
	}
	wres, err := storeWith(t, srv.HTTPAddr, tokenFor(t, c, "acl-operator.hcl", "web")).Commit(ctx, "web", spec, "op", "order")
	if err != nil {
		t.Fatalf("commit with the operator's policy: %v", err)
	}
	agentSt := storeWith(t, srv.HTTPAddr, tokenFor(t, c, "acl-policy.hcl", "web"))
	statusSt := storeWith(t, srv.HTTPAddr, tokenFor(t, c, "acl-status.hcl", "web"))
	kvOnly := storeWith(t, srv.HTTPAddr, tokenWith(t, c, "kv-only", fmt.Sprintf("key_prefix %q { policy = \"read\" }", k.Root())))
	gate := func(read func() (*coordinator.GroupState, error)) coordinator.Verdict {
		t.Helper()
		gs, err := read()
		if err != nil {
			t.Fatal(err)
		}
		return gs.Gate()
	}
	agentRead := func() (*coordinator.GroupState, error) { return agentSt.ReadFor(ctx, "web", "n1") }
	statusRead := func() (*coordinator.GroupState, error) { return statusSt.Read(ctx, "web", nil) }
	if v := gate(agentRead); !v.Open {
		t.Fatalf("agent, managers converged, no other node: %s %q, want open", v.State, v.Reason)
	}
	if v := gate(func() (*coordinator.GroupState, error) { return kvOnly.Read(ctx, "web", nil) }); v.State != coordinator.GateWaitingForGroup ||
		!strings.HasPrefix(v.Reason, "waiting for group managers (cannot read it: ") {
		t.Fatalf("no right on managers: %s %q, want waiting, naming why", v.State, v.Reason)
	}
	put("managers", "m2", "", "", coordinator.StateWaiting, mres.SHA)
	want := "waiting for group managers (1 of 2 converged on " + coordinator.ShortSHA(mres.SHA) + ")"
	for name, read := range map[string]func() (*coordinator.GroupState, error){"agent": agentRead, "status": statusRead} {
		if v := gate(read); v.State != coordinator.GateWaitingForGroup || v.Reason != want {
			t.Errorf("%s: %s %q, want %q", name, v.State, v.Reason, want)
		}
	}
	put("managers", "m2", "", mres.SHA, coordinator.StateConverged, mres.SHA)
	// The agent's Consul node is the leader's: it waits for n2.
	put("web", "n2", "elsewhere", "", coordinator.StateWaiting, wres.SHA)
	if v := gate(agentRead); v.State != coordinator.GateWaitingToGoLast || !strings.HasSuffix(v.Reason, "not converged yet: n2") {
		t.Fatalf("agent on the leader's node: %s %q, want %s for n2", v.State, v.Reason, coordinator.GateWaitingToGoLast)
	}
	gs, err := statusRead()
	if err != nil {
		t.Fatal(err)
	}
	if v := gs.Gate(); !v.Open {
		t.Fatalf("status: %s %q, want open (the wait to go last is the leader's node's)", v.State, v.Reason)
	}
}
