package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
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
	spec, _, err := hashspec.Load([]byte(`{"container":{"image":"demo:v1"},"update":{
		"block_on":[{"service":"postgres"}],"block_on_node":[{"check":"disk"}]}}`), hashspec.FormatJSON, "s.json")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
