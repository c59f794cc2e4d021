package agent_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// With an AliveURL, the agent's session is bound to an HTTP check that
// Consul runs: the converged agent makes one, which then serves rollout
// after rollout with nothing passed to keep it, and stopping the agent
// ends it.
func TestAliveSessionOutlivesRollouts(t *testing.T) {
	counted := &testkit.Counter{}
	g := groupkit.NewVia(t, "alive", counted)
	srv, st, group := g.Srv, g.Store, g.Name
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
	testkit.Eventually(t, 30*time.Second, "a session made while converged", func() bool {
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
		testkit.Eventually(t, 30*time.Second, release+" converged", func() bool {
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
		if n := counted.Containing(path); n != want {
			t.Errorf("%d requests to %s, want %d", n, path, want)
		}
	}
	p.stop(t)
	testkit.Eventually(t, 10*time.Second, "the session gone with the stopped agent", func() bool {
		ss, _, err := srv.Client().Session().List(nil)
		return err == nil && len(ss) == 0
	})
}

// failSessions answers each session create with Consul's 500 while on;
// with forward, after passing it on to Consul, which makes the session: a
// try whose answer ran out, which a Consul agent busy with a fleet's
// start-up carries through after the client gave up.
type failSessions struct {
	next    http.RoundTripper
	forward bool
	on      atomic.Bool
	failed  atomic.Int64
}

func (r *failSessions) RoundTrip(req *http.Request) (*http.Response, error) {
	if !r.on.Load() || !strings.HasPrefix(req.URL.Path, "/v1/session/create") {
		return r.next.RoundTrip(req)
	}
	if r.forward {
		resp, err := r.next.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		resp.Body.Close()
	}
	r.failed.Add(1)
	return consulReply(req, http.StatusInternalServerError, "rpc error making call: timeout"), nil
}

// idleWithFailedSession starts n1 of a new group, running its release
// already, so that it converges with no turn, and returns once its idle
// session try failed as fail makes it fail (which it leaves on).
func idleWithFailedSession(t *testing.T, name string, fail *failSessions) (*groupkit.Group, *inProcAgent) {
	t.Helper()
	fail.next = cleanhttp.DefaultPooledTransport()
	fail.on.Store(true)
	g := groupkit.NewVia(t, name, &testkit.Counter{Next: fail})
	p := aliveAgentOn(t, g, agent.AliveHandler(), true)
	testkit.Eventually(t, 30*time.Second, "n1 converged, its session try failed", func() bool {
		n := nodeState(t, g.Store, g.Name, "n1")
		return n != nil && n.State == coordinator.StateConverged && fail.failed.Load() > 0
	})
	return g, p
}

// An agent whose session could not be made while converged (its Consul
// agent busy with a whole fleet's start-up, say) tries again, with no
// commit to prompt it, so that the session is there before the next
// rollout and not made in its burst.
func TestIdleSessionIsTriedAgain(t *testing.T) {
	refuse := &failSessions{}
	g, p := idleWithFailedSession(t, "idleretry", refuse)
	defer p.stop(t)
	refuse.on.Store(false)
	testkit.Eventually(t, 30*time.Second, "a session made with no commit", func() bool {
		ss, _, err := g.Srv.Client().Session().List(nil)
		return err == nil && len(ss) == 1
	})
}

// A session try whose answer was lost (Consul made the session, the client
// gave up) would leave a session on the alive check for as long as the
// process answers, one per idle retry: the next try drops the check it was
// bound to, and Consul the session with it.
func TestIdleSessionTriesLeaveNoSessions(t *testing.T) {
	lose := &failSessions{forward: true}
	g, p := idleWithFailedSession(t, "idleleak", lose)
	defer p.stop(t)
	sessionsOf := func() []string {
		ss, _, err := g.Srv.Client().Session().List(nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range ss {
			if s.Name == coordinator.ServiceID(g.Name, "n1") {
				ids = append(ids, s.ID)
			}
		}
		return ids
	}
	testkit.Eventually(t, 10*time.Second, "the lost answer's session in Consul", func() bool { return len(sessionsOf()) == 1 })
	leaked := sessionsOf()[0]
	lose.on.Store(false)
	// The agent tries again within its backoff (5-10 s after one failure).
	testkit.Eventually(t, 40*time.Second, "n1's own session made, and it alone", func() bool {
		ss := sessionsOf()
		return len(ss) == 1 && ss[0] != leaked
	})
}

// flakyAlive answers for the agent like AliveHandler, but fails the first
// probe after each of the agent's service registrations, never two in a
// row: less than the alive check's FailuresBeforeCritical, so a session on
// it must outlive every one.
type flakyAlive struct {
	mu         sync.Mutex
	armed      bool // fail after registrations
	failNext   bool
	lastFailed bool
	down       bool // fail every probe
	failed     int
	probes     int
}

func (f *flakyAlive) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.probes++
	fail := f.down || (f.failNext && !f.lastFailed)
	if fail && !f.down {
		f.failNext = false
		f.failed++
	}
	f.lastFailed = fail
	f.mu.Unlock()
	if fail {
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	agent.AliveHandler().ServeHTTP(w, r)
}

// registered is told of each service registration that Consul accepted.
func (f *flakyAlive) registered() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = f.armed
}

func (f *flakyAlive) set(do func(*flakyAlive)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	do(f)
}

// Consul restarts a check that a registration lists, and arms the new one
// to go critical at its first failed run. The agent registers its service
// on each change of state, so if each registration listed the alive check,
// a single probe that failed after one would end a live agent's session,
// and cost a holder its turn. It is listed once; a run of failures as long
// as FailuresBeforeCritical still ends the session.
func TestAliveCheckOutlivesStateChanges(t *testing.T) {
	alive := &flakyAlive{}
	// alive hears of each service registration Consul accepted.
	g := groupkit.NewVia(t, "flaky", &testkit.Counter{OnReply: func(r *http.Request, resp *http.Response) {
		if resp.StatusCode == http.StatusOK && strings.HasPrefix(r.URL.Path, "/v1/agent/service/register") {
			alive.registered()
		}
	}})
	srv, st, group := g.Srv, g.Store, g.Name
	rt := &switchHealth{}
	rt.set(true, "serving")
	mux := http.NewServeMux()
	mux.Handle("/health", agent.HealthHandler(rt))
	mux.Handle("/alive", alive)
	hs := httptest.NewServer(mux)
	defer hs.Close()
	commitRecording(t, st, group, "v1", "")
	p := startAgentWith(t, agent.Config{Group: group, Node: "n1", Store: st, Runtime: rt, Resync: time.Hour,
		HealthURL: hs.URL + "/health", AliveURL: hs.URL + "/alive"})
	defer p.stop(t)
	var first string
	testkit.Eventually(t, 30*time.Second, "a session made while converged", func() bool {
		ss, _, err := srv.Client().Session().List(nil)
		if err == nil && len(ss) == 1 {
			first = ss[0].ID
		}
		return first != ""
	})
	// A check's first run, too, goes critical if it fails: the session is
	// made on the check as soon as Consul has it, so the test starts once
	// that has passed.
	testkit.Eventually(t, 10*time.Second, "the alive check's first run", func() bool {
		alive.mu.Lock()
		defer alive.mu.Unlock()
		return alive.probes > 0
	})
	alive.set(func(f *flakyAlive) { f.armed = true })
	for i, release := range []string{"v2", "v3", "v4"} {
		sha := commitRecording(t, st, group, release, "")
		testkit.Eventually(t, 30*time.Second, release+" converged and mirrored", func() bool {
			n := nodeState(t, st, group, "n1")
			svc, _, err := srv.Client().Agent().Service("rollagent-"+group+"-n1", nil)
			return n != nil && n.SHA == sha && n.State == coordinator.StateConverged &&
				err == nil && svc.Meta["state"] == string(coordinator.StateConverged) && svc.Meta["sha"] == sha
		})
		testkit.Eventually(t, 10*time.Second, "a probe failed after "+release+" was mirrored", func() bool {
			alive.mu.Lock()
			defer alive.mu.Unlock()
			return alive.failed > i && !alive.failNext
		})
	}
	if s, _, err := srv.Client().Session().Info(first, nil); err != nil || s == nil {
		t.Fatalf("session %s: %v, %v; want it alive after single failed probes", first, s, err)
	}
	alive.set(func(f *flakyAlive) { f.down = true })
	testkit.Eventually(t, 15*time.Second, "the session ended by probes failing in a row", func() bool {
		s, _, err := srv.Client().Session().Info(first, nil)
		return err == nil && s == nil
	})
}
