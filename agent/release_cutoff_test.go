package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// releaseBound stands in for the release's own bound (settleTimeout, a
// minute), so that an outage outlasts it in seconds.
const releaseBound = 4 * time.Second

// Issue 20: Consul out of reach during a release for longer than the
// release's bound, with the session on the alive check (the default
// --health-addr=auto). The release gave up, closing the session failed
// too, and the agent dropped a session that Consul kept, its alive check
// passing: the holder key stayed locked and, at K = 1, every later turn
// waited behind it for good. Now a release that cannot reach Consul is
// tried again at the next look while the agent lives: once Consul is back
// the node's claim and holder key go, and the slot passes to another node.
// The outage is the holder's alone (its client is cut off, Consul stays
// up), which is what keeps its alive check, and its session, passing.
func TestReleaseCutOffFromConsulIsRetried(t *testing.T) {
	g := groupkit.New(t, "cutrelease") // the test's view, never cut off
	srv, st, group := g.Srv, g.Store, g.Name
	v1 := commitRecording(t, st, group, "v1", "")
	v2, _ := recordingSpec(t, group, "v2", "").SHA()
	c := &cutOnce{victim: make(chan string, 1)}
	agents := map[string]*inProcAgent{}
	faults := map[string]*consultest.Faults{}
	for _, n := range []string{"n1", "n2"} {
		agents[n], faults[n] = startCuttable(t, srv, group, n, v2, c)
	}
	for n := range agents {
		waitNode(t, st, group, n, "converged on v1", converged(v1))
	}
	commitRecording(t, st, group, "v2", "")
	var victim string
	select {
	case victim = <-c.victim:
	case <-time.After(time.Minute):
		t.Fatal("no node reached its v2 release within a minute")
	}
	cut := time.Now()
	// The log says only when the release has given up, to end the outage
	// past it; what the test asserts, it reads from Consul.
	g.WaitFor(releaseBound+30*time.Second, victim+"'s release to give up", func() bool {
		return strings.Contains(agents[victim].logs.String(), "cannot release the slot yet")
	})
	// The looks that follow find Consul out of reach too, as in a longer
	// outage: the claim must survive them, not only the release.
	time.Sleep(releaseBound)
	holdersOf(t, g, func(hs *lockstep.Holders) string {
		if cl, ok := hs.ClaimOf(victim); !ok || !hs.Live(cl.Session) {
			return "the victim's claim and holder key are not both there when Consul comes back"
		}
		return ""
	})
	faults[victim].Cut(false)
	t.Logf("%s cut off from Consul for %s, past its release's bound of %s", victim, time.Since(cut).Round(time.Millisecond), releaseBound)
	back := time.Now()
	g.WaitFor(45*time.Second, victim+"'s claim and holder key to go", func() bool {
		return slotFree(t, g, victim)
	})
	t.Logf("%s's slot given back %s after Consul came back", victim, time.Since(back).Round(time.Millisecond))
	for n := range agents {
		if n != victim {
			waitNode(t, st, group, n, "granted the slot and converged on v2", converged(v2))
		}
	}
	v3 := commitRecording(t, st, group, "v3", "")
	for n := range agents {
		waitNode(t, st, group, n, "converged on the following commit", converged(v3))
	}
}

// cutOnce cuts off the first agent that finds its v2 workload healthy,
// right then, before it releases, and says which.
type cutOnce struct {
	once   sync.Once
	victim chan string
}

// hookedRuntime is a recordingRuntime that calls hook right before it
// says that a workload of sha is healthy.
type hookedRuntime struct {
	*recordingRuntime
	sha  string
	hook func()
}

func (r *hookedRuntime) WaitHealthy(ctx context.Context, spec *hashspec.Spec) error {
	if r.SHA() == r.sha {
		r.hook()
	}
	return r.recordingRuntime.WaitHealthy(ctx, spec)
}

// startCuttable runs node's agent on a client of its own that c can cut
// off, with its health and alive checks served over loopback and run by
// Consul, as --health-addr=auto does.
func startCuttable(t *testing.T, srv *consultest.Server, group, node, sha string, c *cutOnce) (*inProcAgent, *consultest.Faults) {
	t.Helper()
	cl, f := srv.FaultyClient()
	rt := &hookedRuntime{recordingRuntime: &recordingRuntime{}, sha: sha, hook: func() {
		c.once.Do(func() { f.Cut(true); c.victim <- node })
	}}
	mux := http.NewServeMux()
	mux.Handle("/health", agent.HealthHandler(rt))
	mux.Handle("/alive", agent.AliveHandler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	cfg := agent.Config{Group: group, Node: node, Store: coordinator.NewStore(cl, ""), Runtime: rt, Resync: time.Hour,
		HealthURL: hs.URL + "/health", AliveURL: hs.URL + "/alive"}
	return startAgentWith(t, agent.WithSettleTimeout(cfg, releaseBound)), f
}

func converged(sha string) func(n *coordinator.NodeState) bool {
	return func(n *coordinator.NodeState) bool { return n.State == coordinator.StateConverged && n.SHA == sha }
}

// holdersOf reads the group's slot from Consul and fails the test with
// what check says is wrong with it, if anything.
func holdersOf(t *testing.T, g *groupkit.Group, check func(*lockstep.Holders) string) {
	t.Helper()
	hs, err := g.Holders()
	if err != nil {
		t.Fatal(err)
	}
	if msg := check(hs); msg != "" {
		t.Fatalf("%s: holding %v, claims %v", msg, hs.Holding, hs.Claims)
	}
}

// slotFree says Consul's slot record keeps neither a claim nor a locked
// holder key of node's.
func slotFree(t *testing.T, g *groupkit.Group, node string) bool {
	t.Helper()
	hs, err := g.Holders()
	if err != nil {
		return false
	}
	_, claimed := hs.ClaimOf(node)
	_, holding := groupkit.Holding(hs, node)
	return !claimed && !holding
}
