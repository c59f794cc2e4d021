package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// An agent's liveness is its alive instance's own check. The alias of it
// on the group's service, which the UI shows, turns critical too while any
// node-level check of the Consul node is (an operator's disk check, `consul
// maint`): that says nothing of the agent, and must not count the node as
// down and hold the rollout. The alive check failing does.
func TestDownReadsTheAliveInstanceNotItsAlias(t *testing.T) {
	_, c, st := groupkit.Dev(t)
	// Consul's alias of a local service takes up to a minute to follow a
	// node-level check.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	aliveCheck := "n1-alive"
	regs := []*api.AgentServiceRegistration{
		{ID: coordinator.AliveServiceID("web", "n1"), Name: coordinator.AliveServiceName, Tags: coordinator.AliveTags("web", "n1"),
			Check: &api.AgentServiceCheck{CheckID: aliveCheck, TTL: "10m", Status: api.HealthPassing}},
		{ID: coordinator.ServiceID("web", "n1"), Name: coordinator.ServiceName("web"), Checks: api.AgentServiceChecks{
			{CheckID: coordinator.WorkloadCheckID("web", "n1"), TTL: "10m", Status: api.HealthPassing},
			{CheckID: coordinator.AliveAliasCheckID("web", "n1"), AliasService: coordinator.AliveServiceID("web", "n1")},
		}},
	}
	for _, r := range regs {
		if err := c.Agent().ServiceRegister(r); err != nil {
			t.Fatal(err)
		}
	}
	rec := coordinator.NodeState{Node: "n1", SHA: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		State: coordinator.StateConverged, Since: time.Now().UTC()}
	if err := st.PutNode(ctx, "web", rec); err != nil {
		t.Fatal(err)
	}
	waitDown(t, st, map[string]coordinator.DownReason{}, 10*time.Second)

	// An operator's node check goes critical: the alias follows it.
	if err := c.Agent().CheckRegister(&api.AgentCheckRegistration{ID: "disk", Name: "disk",
		AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: api.HealthCritical}}); err != nil {
		t.Fatal(err)
	}
	alias := coordinator.AliveAliasCheckID("web", "n1")
	testkit.Eventually(t, 90*time.Second, "the alias critical with the node's check", func() bool {
		cs, err := c.Agent().Checks()
		return err == nil && cs[alias] != nil && cs[alias].Status == api.HealthCritical
	})
	if got, err := st.Down(ctx, "web"); err != nil || len(got) != 0 {
		t.Fatalf("Down = %v, %v with only a node-level check critical; want no node down", got, err)
	}

	// The agent stops answering: its alive check goes critical.
	if err := c.Agent().FailTTL(aliveCheck, "no answer"); err != nil {
		t.Fatal(err)
	}
	waitDown(t, st, map[string]coordinator.DownReason{"n1": coordinator.DownAgent}, 10*time.Second)

	// Another group's alive instance is not web's, whatever its ID says.
	other := &api.AgentServiceRegistration{ID: coordinator.AliveServiceID("web", "n2"), Name: coordinator.AliveServiceName,
		Tags: coordinator.AliveTags("api", "n2"), Check: &api.AgentServiceCheck{CheckID: "n2-alive", TTL: "10m", Status: api.HealthCritical}}
	if err := c.Agent().ServiceRegister(other); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the catalog shows api's critical alive check", func() bool {
		cs, _, err := c.Health().State(api.HealthCritical, nil)
		for _, hc := range cs {
			if err == nil && hc.CheckID == "n2-alive" {
				return true
			}
		}
		return false
	})
	if got, err := st.Down(ctx, "web"); err != nil || len(got) != 1 || got["n1"] != coordinator.DownAgent {
		t.Fatalf("Down = %v, %v; want n1 alone, %s", got, err, coordinator.DownAgent)
	}
}
