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

// review 901102a: an agent killed while it ran with an alive check (HTTP
// health) leaves its alive instance, whose check is critical from then on,
// in its Consul agent. Before the alive instance, the check was on the
// group's service, and the next agent's registration (which replaces the
// service's checks in TTL mode) dropped it. Restarted with
// --health-addr=off (TTL mode), the agent never registers nor deregisters
// the alive instance, so Down counts the node, alive and converged, as
// agent_not_answering for good, against max_parallel.
func TestTTLModeAgentDropsAKilledPredecessorsAliveInstance(t *testing.T) {
	g := groupkit.New(t, "leftover")
	c := g.Client
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.AliveServiceID(g.Name, "n1"),
		Name: coordinator.AliveServiceName, Tags: coordinator.AliveTags(g.Name, "n1"),
		Check: &api.AgentServiceCheck{CheckID: coordinator.ServiceID(g.Name, "n1") + ":alive-dead", Name: "rollagent alive",
			TTL: "10m", Status: api.HealthCritical}}); err != nil {
		t.Fatal(err)
	}
	rt := &switchHealth{}
	rt.set(true, "serving")
	commitRecording(t, g.Store, g.Name, "v1", "")
	p := startAgentWith(t, agent.Config{Group: g.Name, Node: "n1", Store: g.Store, Runtime: rt, Resync: time.Hour})
	defer p.stop(t)
	testkit.Eventually(t, 30*time.Second, "n1 converged", func() bool {
		n := nodeState(t, g.Store, g.Name, "n1")
		return n != nil && n.State == coordinator.StateConverged
	})
	var down map[string]coordinator.DownReason
	if !testkit.PollEvery(20*time.Second, 200*time.Millisecond, func() bool {
		var err error
		down, err = g.Store.Down(t.Context(), g.Name)
		return err == nil && len(down) == 0
	}) {
		t.Fatalf("Down = %v with n1's agent running and converged; want no node down", down)
	}
}
