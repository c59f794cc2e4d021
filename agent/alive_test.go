package agent_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// With an AliveURL, the agent's session is bound to an HTTP check that
// Consul runs: the converged agent makes one, which then serves rollout
// after rollout with nothing passed to keep it, and stopping the agent
// ends it.
func TestAliveSessionOutlivesRollouts(t *testing.T) {
	srv := consultest.NewDev(t)
	c, counted := countedClient(t, srv)
	st := coordinator.NewStore(c, "")
	group := fleettest.Group("alive")
	rt := &switchHealth{}
	rt.set(true, "serving")
	mux := http.NewServeMux()
	mux.Handle("/health", agent.HealthHandler(rt))
	mux.Handle("/alive", agent.AliveHandler())
	hs := httptest.NewServer(mux)
	defer hs.Close()
	commitRecording(t, st, group, "v1", "")
	p := startAgentWith(t, agent.Config{Group: group, Node: "n1", Store: st, Runtime: rt, Resync: time.Hour,
		HealthURL: hs.URL + "/health", AliveURL: hs.URL + "/alive"})
	// The converged agent makes its session ahead of the first rollout,
	// bound to a check of its own process.
	var first, aliveID string
	fleettest.WaitFor(t, 30*time.Second, "a session made while converged", func() bool {
		ss, _, err := srv.Client().Session().List(nil)
		if err != nil || len(ss) != 1 {
			return false
		}
		for _, id := range ss[0].NodeChecks {
			if strings.HasPrefix(id, "rollagent-"+group+"-n1:alive-") {
				first, aliveID = ss[0].ID, id
			}
		}
		return first != ""
	})
	for _, release := range []string{"v2", "v3"} {
		sha := commitRecording(t, st, group, release, "")
		fleettest.WaitFor(t, 30*time.Second, release+" converged", func() bool {
			n := nodeState(t, st, group, "n1")
			return n != nil && n.SHA == sha && n.State == coordinator.StateConverged
		})
		ss, _, err := srv.Client().Session().List(nil)
		if err != nil || len(ss) != 1 || !slices.Contains(ss[0].NodeChecks, aliveID) {
			t.Fatalf("after %s: sessions %+v (%v), want one bound to %s", release, ss, err, aliveID)
		}
		if ss[0].ID != first {
			t.Fatalf("after %s: session %s, want the first rollout's %s, kept", release, ss[0].ID, first)
		}
	}
	cs, err := srv.Client().Agent().Checks()
	if err != nil || cs[aliveID] == nil || cs[aliveID].Type != "http" || cs[aliveID].Status != api.HealthPassing {
		t.Fatalf("alive check %+v (%v), want an HTTP check, passing", cs[aliveID], err)
	}
	for path, want := range map[string]int{"/agent/check/update/": 0, "/session/create": 1, "/session/destroy": 0, "/agent/check/deregister/": 0} {
		if n := counted.count(path); n != want {
			t.Errorf("%d requests to %s, want %d", n, path, want)
		}
	}
	p.stop(t)
	fleettest.WaitFor(t, 10*time.Second, "the session gone with the stopped agent", func() bool {
		ss, _, err := srv.Client().Session().List(nil)
		return err == nil && len(ss) == 0
	})
}
