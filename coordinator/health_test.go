package coordinator_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A node of the group whose agent's liveness check is critical is
// unavailable; one whose checks pass, one whose workload alone is
// unhealthy (its agent acts for itself), and another group's, are not.
func TestUnavailable(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	reg := func(group, node, alive, workload string) {
		t.Helper()
		err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.ServiceID(group, node),
			Name: coordinator.ServiceName(group), Checks: api.AgentServiceChecks{
				{CheckID: node + group, TTL: "1m", Status: alive},
				{CheckID: coordinator.WorkloadCheckID(group, node), TTL: "1m", Status: workload}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	reg("web", "n1", api.HealthPassing, api.HealthPassing)
	reg("web", "n2", api.HealthCritical, api.HealthPassing)
	reg("web", "n4", api.HealthPassing, api.HealthCritical)
	reg("db", "n3", api.HealthCritical, api.HealthCritical)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := st.Unavailable(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("Unavailable = %v, want [n2]", got)
	}
	if err := c.Agent().UpdateTTL("n2web", "back", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Unavailable(ctx, "web"); err != nil || len(got) != 0 {
		t.Fatalf("Unavailable = %v, %v once n2 passes, want none", got, err)
	}
}
