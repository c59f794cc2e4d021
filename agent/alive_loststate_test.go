package agent_test

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
)

// review 901102a: a Consul agent that lost its state (simulated here by
// deregistering both of n1's instances) has neither the alive instance nor
// the group's service. registerAlive skips the alive instance until a
// session fails to be made (aliveOn stays true until forget), but the next
// change of the node's state (a pause, here) registers the group's service
// with the alias of the missing instance, which Consul makes critical:
// agents from before the alive instance (mixed versions) count the node,
// whose agent answers, as agent_not_answering, and the UI shows it so.
func TestLostStateAliasIsNotCriticalWhileTheAgentAnswers(t *testing.T) {
	g, p := startAliveAgent(t, "loststate", agent.AliveHandler())
	defer p.stop(t)
	c, group := g.Client, g.Name
	alias := coordinator.AliveAliasCheckID(group, "n1")
	testkit.Eventually(t, 30*time.Second, "n1 converged, its alias passing", func() bool {
		n := nodeState(t, g.Store, group, "n1")
		cs, err := c.Agent().Checks()
		return n != nil && n.State == coordinator.StateConverged && err == nil && cs[alias] != nil && cs[alias].Status == api.HealthPassing
	})
	for _, id := range []string{coordinator.ServiceID(group, "n1"), coordinator.AliveServiceID(group, "n1")} {
		if err := c.Agent().ServiceDeregister(id); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := g.Store.PauseBy(t.Context(), group, "review", "op"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "n1's service registered again", func() bool {
		cs, err := c.Agent().Checks()
		return err == nil && cs[alias] != nil
	})
	var why string
	if !testkit.PollEvery(15*time.Second, 200*time.Millisecond, func() bool {
		cs, err := c.Agent().Checks()
		if err != nil || cs[alias] == nil || cs[alias].Status != api.HealthPassing {
			why = "alias missing or not passing"
			if err == nil && cs[alias] != nil {
				why = "alias " + cs[alias].Status + ": " + cs[alias].Output
			}
			return false
		}
		return true
	}) {
		t.Fatalf("n1's agent answers, yet its group service's alive alias: %s", why)
	}
}
