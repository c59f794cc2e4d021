package agent_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// startAliveAgent runs node n1 of a new group with HTTP health and alive
// checks, alive answering for it, v1 committed: the group, and the
// agent.
func startAliveAgent(t *testing.T, name string, alive http.Handler) (*groupkit.Group, *inProcAgent) {
	t.Helper()
	g := groupkit.New(t, name)
	return g, startAliveAgentOn(t, g, alive)
}

// startAliveAgentOn is startAliveAgent in g.
func startAliveAgentOn(t *testing.T, g *groupkit.Group, alive http.Handler) *inProcAgent {
	t.Helper()
	return aliveAgentOn(t, g, alive, false)
}

// aliveAgentOn is startAliveAgentOn, with n1 running the first release
// already if running: as every node of a fleet whose agents start
// together, it converges with no turn, so with no session either.
func aliveAgentOn(t *testing.T, g *groupkit.Group, alive http.Handler, running bool) *inProcAgent {
	t.Helper()
	rt := &switchHealth{}
	rt.set(true, "serving")
	mux := http.NewServeMux()
	mux.Handle("/health", agent.HealthHandler(rt))
	mux.Handle("/alive", alive)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	if sha := commitRecording(t, g.Store, g.Name, "v1", ""); running {
		rt.sha = sha
	}
	return startAgentWith(t, agent.Config{Group: g.Name, Node: "n1", Store: g.Store, Runtime: rt, Resync: time.Hour,
		HealthURL: hs.URL + "/health", AliveURL: hs.URL + "/alive"})
}

// Consul copies a service's tags into a check only when a registration
// lists it, and the catalog's copy takes the service's current tags at
// every sync: a check of the agent's left out of the registrations that
// change the tags (the alive check, which must not be re-armed) differs
// from its catalog copy for good, and Consul's anti-entropy writes it to
// the catalog again at every full sync, idle or not. After several changes
// of state, every check of the node's instances carries its service's
// current tags, in the local agent and in the catalog.
func TestChecksCarryTheirServicesTags(t *testing.T) {
	g, p := startAliveAgent(t, "tags", agent.AliveHandler())
	defer p.stop(t)
	srv, st, group := g.Srv, g.Store, g.Name
	ours := func(serviceID string) bool { return strings.HasPrefix(serviceID, coordinator.ServiceID(group, "n1")) }
	for _, release := range []string{"v1", "v2", "v3"} {
		sha := ""
		if release != "v1" {
			sha = commitRecording(t, st, group, release, "")
		}
		testkit.Eventually(t, 30*time.Second, release+" converged and mirrored", func() bool {
			n := nodeState(t, st, group, "n1")
			svc, _, err := srv.Client().Agent().Service(coordinator.ServiceID(group, "n1"), nil)
			return n != nil && (sha == "" || n.SHA == sha) && n.State == coordinator.StateConverged &&
				err == nil && svc.Meta["state"] == string(coordinator.StateConverged) && svc.Meta["sha"] == n.SHA
		})
		svcs, err := srv.Client().Agent().Services()
		if err != nil {
			t.Fatal(err)
		}
		// api.AgentCheck leaves ServiceTags out.
		var checks map[string]struct {
			CheckID, Name, Type, ServiceID string
			ServiceTags                    []string
		}
		if _, err := srv.Client().Raw().Query("/v1/agent/checks", &checks, nil); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range checks {
			if !ours(c.ServiceID) {
				continue
			}
			seen[c.Name+"/"+c.Type] = true
			if svc := svcs[c.ServiceID]; svc == nil || !slices.Equal(c.ServiceTags, svc.Tags) {
				t.Fatalf("after %s, the local agent's check %s (%s) has tags %v, its service %v", release, c.CheckID, c.Name, c.ServiceTags, svc)
			}
		}
		if !seen["workload health/http"] || !seen["rollagent alive/http"] {
			t.Fatalf("after %s, n1's checks in the local agent: %v; want the workload's and the alive one, HTTP", release, seen)
		}
		var why string
		if !testkit.PollEvery(15*time.Second, 200*time.Millisecond, func() bool {
			why = catalogTagsDiffer(srv.Client(), svcs, ours)
			return why == ""
		}) {
			t.Fatalf("after %s, the catalog: %s", release, why)
		}
	}
}

// catalogTagsDiffer says how the catalog's checks of the local services
// that ours names differ in tags from those services, "" if none does.
func catalogTagsDiffer(c *api.Client, local map[string]*api.AgentService, ours func(string) bool) string {
	names := map[string]bool{}
	for id, s := range local {
		if ours(id) {
			names[s.Service] = true
		}
	}
	for name := range names {
		entries, _, err := c.Health().Service(name, "", false, nil)
		if err != nil {
			return err.Error()
		}
		for _, e := range entries {
			if !ours(e.Service.ID) {
				continue
			}
			if want := local[e.Service.ID]; want == nil || !slices.Equal(e.Service.Tags, want.Tags) {
				return fmt.Sprintf("instance %s has tags %v, the local agent %v", e.Service.ID, e.Service.Tags, want)
			}
			for _, chk := range e.Checks {
				if chk.ServiceID != "" && !slices.Equal(chk.ServiceTags, e.Service.Tags) {
					return fmt.Sprintf("check %s (%s) has tags %v, its service %v", chk.CheckID, chk.Name, chk.ServiceTags, e.Service.Tags)
				}
			}
		}
	}
	return ""
}

// An agent that stops answering its alive check counts as down
// (DownAgent): the check that goes critical on the group's service is
// the alias of the alive one, and the session bound to the alive check
// ends with it.
func TestDeadAgentCountsDownAgent(t *testing.T) {
	alive := &flakyAlive{}
	g, p := startAliveAgent(t, "deadalive", alive)
	defer p.stop(t)
	srv, st, group := g.Srv, g.Store, g.Name
	var session string
	testkit.Eventually(t, 30*time.Second, "a session made while converged", func() bool {
		ss, _, err := srv.Client().Session().List(nil)
		for _, s := range ss {
			if err == nil && strings.HasPrefix(s.Name, coordinator.ServiceID(group, "n1")) {
				session = s.ID
			}
		}
		return session != ""
	})
	if down, err := st.Down(t.Context(), group); err != nil || len(down) != 0 {
		t.Fatalf("Down while the agent answers: %v, %v; want none", down, err)
	}
	alive.set(func(f *flakyAlive) { f.down = true })
	var down map[string]coordinator.DownReason
	testkit.Eventually(t, 20*time.Second, "n1 down as its agent does not answer", func() bool {
		var err error
		down, err = st.Down(t.Context(), group)
		return err == nil && down["n1"] == coordinator.DownAgent
	})
	testkit.Eventually(t, 10*time.Second, "the session ended", func() bool {
		s, _, err := srv.Client().Session().Info(session, nil)
		return err == nil && s == nil
	})
}

// A killed agent's alive check, and the session bound to it, go when the
// next agent of its node starts, wherever the check is: on the alive
// instance (an agent of this version), or on the group's service (one of
// an earlier version, or under a policy from before the alive instance).
func TestPredecessorsAliveCheckIsDropped(t *testing.T) {
	cases := []struct {
		name      string
		serviceID func(group, node string) string
		service   func(group string) string
	}{
		{"on the alive instance", coordinator.AliveServiceID, func(string) string { return coordinator.AliveServiceName }},
		{"on the group's service", coordinator.ServiceID, coordinator.ServiceName},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := groupkit.New(t, "predalive")
			c := g.Client
			stale := coordinator.ServiceID(g.Name, "n1") + ":alive-session-dead"
			if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: tc.serviceID(g.Name, "n1"), Name: tc.service(g.Name),
				Checks: api.AgentServiceChecks{{CheckID: stale, Name: "rollagent alive", TTL: "10m", Status: api.HealthPassing}}}); err != nil {
				t.Fatal(err)
			}
			var session string
			testkit.Eventually(t, 10*time.Second, "a session on the predecessor's check", func() bool {
				var err error
				session, _, err = c.Session().Create(&api.SessionEntry{Name: "predecessor", NodeChecks: []string{"serfHealth", stale}}, nil)
				return err == nil
			})
			p := startAliveAgentOn(t, g, agent.AliveHandler())
			defer p.stop(t)
			g.WaitFor(30*time.Second, "the predecessor's check and session to go", func() bool {
				checks, err := c.Agent().Checks()
				s, _, serr := c.Session().Info(session, nil)
				return err == nil && serr == nil && checks[stale] == nil && s == nil &&
					checks[coordinator.AliveAliasCheckID(g.Name, "n1")] != nil
			})
		})
	}
}
