package agent_test

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// A session check that a killed agent left on its service (critical once
// nobody passes it) is gone after the next agent registers the service.
func TestStaleSessionCheckIsDropped(t *testing.T) {
	g := groupkit.New(t, "stalecheck")
	c := g.Client
	commitRecording(t, g.Store, g.Name, "v1", "")
	id := "rollagent-" + g.Name + "-n1"
	stale := id + ":session-dead"
	reg := &api.AgentServiceRegistration{ID: id, Name: "rollagent-" + g.Name,
		Checks: api.AgentServiceChecks{{CheckID: stale, Name: "rollagent session", TTL: "3s", Status: api.HealthCritical}}}
	if err := c.Agent().ServiceRegister(reg); err != nil {
		t.Fatal(err)
	}
	startAgent(t, g.Store, g.Name, "n1", &recordingRuntime{}, agent.Allow{})
	waitNode(t, g.Store, g.Name, "n1", "converged", func(n *coordinator.NodeState) bool {
		return n.State == coordinator.StateConverged
	})
	g.WaitFor(10*time.Second, "the stale session check to go", func() bool {
		checks, err := c.Agent().Checks()
		return err == nil && checks[stale] == nil && checks[id+":workload"] != nil
	})
}
