package agent_test

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// A session check that a killed agent left on its service (critical once
// nobody passes it) is gone after the next agent registers the service.
func TestStaleSessionCheckIsDropped(t *testing.T) {
	g := groupkit.New(t, "stalecheck")
	srv, st, group := g.Srv, g.Store, g.Name
	c := srv.Client()
	commitRecording(t, st, group, "v1", "")
	id := "rollagent-" + group + "-n1"
	stale := id + ":session-dead"
	reg := &api.AgentServiceRegistration{ID: id, Name: "rollagent-" + group,
		Checks: api.AgentServiceChecks{{CheckID: stale, Name: "rollagent session", TTL: "3s", Status: api.HealthCritical}}}
	if err := c.Agent().ServiceRegister(reg); err != nil {
		t.Fatal(err)
	}
	startAgent(t, st, group, "n1", &recordingRuntime{}, agent.Allow{})
	waitNode(t, st, group, "n1", "converged", func(n *coordinator.NodeState) bool {
		return n.State == coordinator.StateConverged
	})
	testkit.Eventually(t, 10*time.Second, "the stale session check to go", func() bool {
		checks, err := c.Agent().Checks()
		return err == nil && checks[stale] == nil && checks[id+":workload"] != nil
	})
}
