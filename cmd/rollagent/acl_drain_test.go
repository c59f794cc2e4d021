package main

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
)

// The shipped agent policy may put the service it names for update.drain
// into maintenance on its Consul agent, see it in the catalog and take it
// out again, and no other service: Consul 1.13 asks service write of
// /v1/agent/service/maintenance.
func TestAgentTokenDrainsTheServicesItNames(t *testing.T) {
	srv := aclConsul(t)
	c := srv.Client()
	for _, reg := range []*api.AgentServiceRegistration{{ID: "frontend-1", Name: "frontend"}, {ID: "other-1", Name: "other"}} {
		if err := c.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testkit.Context(t, time.Minute)
	st := storeWith(t, srv.HTTPAddr, tokenFor(t, c, "acl-policy.hcl", "web"))
	local, err := st.LocalServices(ctx, []string{"frontend", "other"})
	if err != nil || len(local["frontend"]) != 1 || len(local["other"]) != 1 {
		t.Fatalf("the agent's token lists %v (%v), want both services", local, err)
	}
	if err := st.SetMaintenance(ctx, "frontend-1", "drain"); err != nil {
		t.Fatalf("the agent's token drains the service it names: %v", err)
	}
	inCatalog := func() map[string]string {
		t.Helper()
		m, err := st.CatalogMaintenance(ctx, "frontend", "")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	testkit.EventuallyEvery(t, 10*time.Second, 50*time.Millisecond, "the drain in the catalog, read with the agent's token",
		func() bool { return inCatalog()["frontend-1"] == "drain" })
	if m, err := st.Maintenance(ctx); err != nil || m["frontend-1"] != "drain" {
		t.Fatalf("the agent's token reads its agent's maintenance as %v (%v)", m, err)
	}
	if err := st.LiftMaintenance(ctx, "frontend-1"); err != nil {
		t.Fatalf("the agent's token lifts the drain: %v", err)
	}
	if err := st.SetMaintenance(ctx, "other-1", "drain"); !errors.Is(err, coordinator.ErrACLDenied) {
		t.Fatalf("the agent's token on a service it does not name: %v, want permission denied", err)
	}
	if err := c.Agent().EnableServiceMaintenance("other-1", "operator"); err != nil {
		t.Fatal(err)
	}
	if err := st.LiftMaintenance(ctx, "other-1"); !errors.Is(err, coordinator.ErrACLDenied) {
		t.Fatalf("the agent's token lifting another service's maintenance: %v, want permission denied", err)
	}
}
