package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A node whose agent died for good holds the budget while down: status
// names the way out, and `node rm --force` takes it out of the count,
// whatever the catalog keeps of its dead agent.
func TestStatusNamesTheWayOutForANodeDown(t *testing.T) {
	srv := consultest.NewDev(t)
	sha := commitWeb(t, srv.HTTPAddr)
	c := srv.Client()
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.ServiceID("web", "n2"),
		Name: coordinator.ServiceName("web"), Check: &api.AgentServiceCheck{CheckID: "n2-alive", TTL: "1m", Status: api.HealthCritical}})
	if err != nil {
		t.Fatal(err)
	}
	putNode(t, st, coordinator.NodeState{Node: "n2", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: time.Now()})
	_, out, _ := runCLI(t, srv.HTTPAddr, "status", "web")
	want := "node n2 is down (its agent does not answer): it counts against max_parallel; restart its agent, or `rollagent node rm web n2 --force` if the node left the group"
	if !strings.Contains(out, want) {
		t.Fatalf("status does not name the way out; want %q in:\n%s", want, out)
	}
	if code, _, errs := runCLI(t, srv.HTTPAddr, "node", "rm", "web", "n2", "--force", "--reason", "host decommissioned"); code != 0 {
		t.Fatalf("node rm: code %d: %s", code, errs)
	}
	if _, out, _ = runCLI(t, srv.HTTPAddr, "status", "web"); strings.Contains(out, "n2 is down") {
		t.Fatalf("n2 still counts after node rm --force:\n%s", out)
	}
	if _, out, _ = runCLI(t, srv.HTTPAddr, "history", "web"); !strings.Contains(out, "host decommissioned") {
		t.Fatalf("the removal is not in the event log:\n%s", out)
	}
}
