package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// The shipped agent and status policies read the checks a spec blocks on
// (update.block_on, and the agent's block_on_node on its own Consul node);
// a token that may not read them keeps the gate closed and says why.
func TestTokensReadTheChecksTheSpecBlocksOn(t *testing.T) {
	srv := aclConsul(t)
	c := srv.Client()
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "pg1", Name: "postgres",
		Check: &api.AgentServiceCheck{CheckID: "pg1-alive", Name: "pg1 alive", TTL: "10m", Status: api.HealthCritical}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Agent().CheckRegister(&api.AgentCheckRegistration{ID: "disk", Name: "disk",
		AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: api.HealthPassing}}); err != nil {
		t.Fatal(err)
	}
	spec := jsonSpec(t, `{"container":{"image":"demo:v1"},"update":{
		"block_on":[{"service":"postgres"}],"block_on_node":[{"check":"disk"}]}}`)
	ctx := testkit.Context(t, time.Minute)
	if _, err := coordinator.NewStore(c, "").Commit(ctx, "web", spec, "op", "blocks"); err != nil {
		t.Fatal(err)
	}
	agentSt := storeWith(t, srv.HTTPAddr, tokenFor(t, c, "acl-policy.hcl", "web"))
	statusSt := storeWith(t, srv.HTTPAddr, tokenFor(t, c, "acl-status.hcl", "web"))
	k, _ := coordinator.NewKeys("", "web")
	kvOnly := storeWith(t, srv.HTTPAddr, tokenWith(t, c, "kv-only", fmt.Sprintf("key_prefix %q { policy = \"read\" }", k.Root())))
	for _, tc := range []struct {
		name string
		read func() (*coordinator.GroupState, error)
		want string
	}{
		{"agent", func() (*coordinator.GroupState, error) { return agentSt.ReadFor(ctx, "web", "n1") }, `blocked by Consul check "pg1 alive" (critical)`},
		{"status", func() (*coordinator.GroupState, error) { return statusSt.Read(ctx, "web", nil) }, `blocked by Consul check "pg1 alive" (critical)`},
		{"no right on the checks", func() (*coordinator.GroupState, error) { return kvOnly.Read(ctx, "web", nil) }, "cannot read Consul health for block_on: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs, err := tc.read()
			if err != nil {
				t.Fatal(err)
			}
			if v := gs.Gate(); v.Open || !strings.HasPrefix(v.Reason, tc.want) || strings.Contains(v.Reason, "(and ") {
				t.Fatalf("gate %s %q, want closed: %q alone", v.State, v.Reason, tc.want)
			}
		})
	}
	if err := c.Agent().UpdateTTL("pg1-alive", "", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	gs, err := agentSt.ReadFor(ctx, "web", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if v := gs.Gate(); !v.Open {
		t.Fatalf("the agent's gate with every check passing: %q, want open", v.Reason)
	}
}

// The shipped agent and status policies read the nodes' meta that
// update.max_parallel_per's domains come from; a token that may not read
// the catalog's nodes tells no domain, rather than take every node for a
// domain of its own.
func TestTokensReadTheNodesDomains(t *testing.T) {
	srv := consultest.New(t, consultest.Options{Token: rootToken,
		HCL: `acl { enabled = true default_policy = "deny" tokens { initial_management = "` + rootToken + `" agent = "` + rootToken + `" } }
node_meta { zone = "a" }`})
	c := srv.Client()
	ctx := testkit.Context(t, time.Minute)
	here, err := c.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	if err := coordinator.NewStore(c, "").PutNode(ctx, "web", coordinator.NodeState{Node: "n1", State: coordinator.StateWaiting,
		ConsulNode: here, Since: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	// The agent's anti-entropy puts its meta into the catalog.
	testkit.Eventually(t, 30*time.Second, "the node's meta in the catalog", func() bool {
		n, _, err := c.Catalog().Node(here, nil)
		return err == nil && n != nil && n.Node != nil && n.Node.Meta["zone"] == "a"
	})
	agentSt := storeWith(t, srv.HTTPAddr, tokenFor(t, c, "acl-policy.hcl", "web"))
	statusSt := storeWith(t, srv.HTTPAddr, tokenFor(t, c, "acl-status.hcl", "web"))
	k, _ := coordinator.NewKeys("", "web")
	kvOnly := storeWith(t, srv.HTTPAddr, tokenWith(t, c, "kv-only-domains", fmt.Sprintf("key_prefix %q { policy = \"read\" }", k.Root())))
	if d, err := agentSt.LocalDomain(ctx, "zone"); err != nil || d != "zone=a" {
		t.Errorf("the agent's token reads its Consul node's meta: %q, %v; want zone=a", d, err)
	}
	for name, st := range map[string]*coordinator.Store{"agent": agentSt, "status": statusSt} {
		if d, err := st.Domains(ctx, "web", "zone"); err != nil || d["n1"] != "zone=a" {
			t.Errorf("the %s token reads the nodes' domains: %v, %v; want n1 in zone=a", name, d, err)
		}
	}
	if _, err := kvOnly.LocalDomain(ctx, "zone"); !errors.Is(err, coordinator.ErrNoDomain) {
		t.Errorf("a token that may not read its agent: %v, want ErrNoDomain", err)
	}
	if d, err := kvOnly.Domains(ctx, "web", "zone"); !errors.Is(err, coordinator.ErrACLDenied) {
		t.Errorf("a token that may not read the nodes: %v, %v; want ErrACLDenied", d, err)
	}
}

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
