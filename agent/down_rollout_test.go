package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// A reboot: n3's agent stops cleanly (systemd at shutdown), which marks its
// record and deregisters its service, then its host goes down (serfHealth
// critical). At K = 1 no node may be replaced while n3 is down, as Consul
// shows it; once the host and its agent are back the rollout goes on.
func TestARebootingNodeCounts(t *testing.T) {
	g := groupkit.New(t, "reboot")
	srv, c, st, group := g.Srv, g.Client, g.Store, g.Name
	host := consultest.NewClients(t, srv, 1, "")[0]
	v1 := commitRecording(t, st, group, "v1", "")
	rts := map[string]*scriptedRuntime{"n1": newScripted(v1), "n2": newScripted(v1)}
	rt3 := newScripted(v1)
	n3 := startAgent(t, coordinator.NewStore(host.Client(), ""), group, "n3", rt3, agent.Allow{})
	waitNode(t, st, group, "n3", "converged on v1", func(n *coordinator.NodeState) bool {
		return n.SHA == v1 && n.State == coordinator.StateConverged
	})
	n3.stop(t)
	waitNode(t, st, group, "n3", "marked stopped", func(n *coordinator.NodeState) bool { return n.Stopped != nil })
	g.WaitFor(30*time.Second, "n3's service gone from the catalog", func() bool {
		inst, _, err := c.Catalog().Service(coordinator.ServiceName(group), "", nil)
		return err == nil && len(inst) == 0
	})
	host.Kill()
	g.WaitFor(time.Minute, "n3's host seen down by Consul", func() bool { return hostCritical(c, host.Name) })

	for n, rt := range rts {
		startAgent(t, st, group, n, rt, agent.Allow{})
	}
	v2 := commitRecording(t, st, group, "v2", "")
	waitInLine(t, g, []string{"n1", "n2"}, rts["n1"], rts["n2"])
	if !hostCritical(c, host.Name) {
		t.Fatal("n3's host came back by itself")
	}
	notReplaced(t, "while n3's host is down (serfHealth critical) after a clean stop of its agent", rts)
	if _, using := slotOf(t, st, group); len(using) != 0 {
		t.Fatalf("the slot is used by %v while n3's host is down", using)
	}
	if down, err := st.Unavailable(t.Context(), group); err != nil || !slices.Equal(down, []string{"n3"}) {
		t.Fatalf("Unavailable = %v, %v; want [n3]", down, err)
	}

	if err := host.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	startAgent(t, coordinator.NewStore(host.Client(), ""), group, "n3", rt3, agent.Allow{})
	convergedAfter(t, st, group, v2, rts, back, "n3's host was back")
}

// A node converged on the desired SHA whose workload then crashes counts
// against K: at K = 1 no other node is replaced while its workload check is
// critical, and its record says it is down. Once it is healthy again the
// rollout goes on.
func TestAConvergedNodeWhoseWorkloadCrashedCounts(t *testing.T) {
	g := groupkit.New(t, "crashed")
	srv, st, group := g.Srv, g.Store, g.Name
	v1 := commitRecording(t, st, group, "v1", "")
	v2 := commitRecording(t, st, group, "v2", "")
	rt3 := newScripted(v2)
	startAgent(t, st, group, "n3", rt3, agent.Allow{})
	waitNode(t, st, group, "n3", "converged on v2", func(n *coordinator.NodeState) bool {
		return n.SHA == v2 && n.State == coordinator.StateConverged
	})
	rt3.setSick(func() bool { return true })
	check := coordinator.WorkloadCheckID(group, "n3")
	// Down takes failing readings over DownAfter (10 s); the check is
	// passed every 10 s.
	g.WaitFor(time.Minute, "n3's workload check critical", func() bool {
		return agentCheck(t, srv.Client(), check) == api.HealthCritical
	})

	rts := map[string]*scriptedRuntime{"n1": newScripted(v1), "n2": newScripted(v1)}
	for n, rt := range rts {
		startAgent(t, st, group, n, rt, agent.Allow{})
	}
	waitInLine(t, g, []string{"n1", "n2"}, rts["n1"], rts["n2"])
	if s := agentCheck(t, srv.Client(), check); s != api.HealthCritical {
		t.Fatalf("n3's workload check is %q, not critical any more", s)
	}
	notReplaced(t, "while n3's workload check is critical", rts)
	if _, using := slotOf(t, st, group); len(using) != 0 {
		t.Fatalf("the slot is used by %v while n3 is down", using)
	}
	waitNode(t, st, group, "n3", "shown down", func(n *coordinator.NodeState) bool { return n.State == "down" })

	healed := time.Now()
	rt3.setSick(nil)
	convergedAfter(t, st, group, v2, rts, healed, "n3 was healthy again")
}

// convergedAfter waits for n1, n2 and n3 to converge on sha, and fails if
// any node of rts was first replaced before since (when the event named
// by what happened).
func convergedAfter(t *testing.T, st *coordinator.Store, group, sha string, rts map[string]*scriptedRuntime, since time.Time, what string) {
	t.Helper()
	convergedOn(t, st, group, sha, rts, since, []string{"n1", "n2", "n3"}, what)
}

// convergedOn is convergedAfter for the nodes named.
func convergedOn(t *testing.T, st *coordinator.Store, group, sha string, rts map[string]*scriptedRuntime, since time.Time, nodes []string, what string) {
	t.Helper()
	for _, n := range nodes {
		waitNode(t, st, group, n, "converged on "+sha, func(n *coordinator.NodeState) bool {
			return n.SHA == sha && n.State == coordinator.StateConverged
		})
	}
	for n, rt := range rts {
		if first := rt.replaces()[0]; first.Before(since) {
			t.Fatalf("%s was replaced at %s, before %s", n, first.Format(time.StampMilli), what)
		}
	}
}

// A first deploy: nothing runs yet on any node, so every workload check is
// critical, and none of them counts: the nodes are replaced one after the
// other, not each waiting on the others.
func TestAFirstDeployDoesNotWaitOnNodesWithNothingDeployed(t *testing.T) {
	g := groupkit.New(t, "first")
	srv, st, group := g.Srv, g.Store, g.Name
	nodes := []string{"n1", "n2", "n3"}
	// A cancelled commit first, so that the agents register their service
	// and their checks go critical, with nothing moving.
	v0 := commitRecording(t, st, group, "v0", "")
	if _, err := st.Cancel(t.Context(), group, v0, "not this one", "test"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		rt := newScripted("")
		rt.setSick(func() bool { return true })
		startAgent(t, st, group, n, rt, agent.Allow{})
	}
	g.WaitFor(time.Minute, "every workload check critical", func() bool {
		for _, n := range nodes {
			if agentCheck(t, srv.Client(), coordinator.WorkloadCheckID(group, n)) != api.HealthCritical {
				return false
			}
		}
		return true
	})
	v1 := commitRecording(t, st, group, "v1", "")
	for _, n := range nodes {
		waitNode(t, st, group, n, "converged on v1", func(n *coordinator.NodeState) bool {
			return n.SHA == v1 && n.State == coordinator.StateConverged
		})
	}
}

// Issue 28, item 7: n3's agent is killed for good on a host that stays up,
// so its service stays in Consul's catalog with its checks critical. At
// K = 1 the next rollout is held: no grant while n3 is down, from Consul's
// holders and records; `status` names n3 and the way out. `node rm`
// refuses it while its dead agent is registered, and `node rm --force`
// takes it out of the count: the rollout finishes on n1 and n2, one at a
// time. n3's agent back writes its record again, so the node is back in
// the group (README, docs/kv-layout.md) and converges too. Both ways an
// agent shows it answers: its session's TTL check on the group's service
// (--health-addr=off), where only the removal mark takes the dead node out
// of the count, and the alive instance's HTTP check (--health-addr=auto).
func TestANodeRemovedByTheOperatorLeavesTheCount(t *testing.T) {
	for _, mode := range []struct {
		name     string
		overHTTP bool
	}{{"ttl", false}, {"http", true}} {
		t.Run(mode.name, func(t *testing.T) { removedLeavesTheCount(t, mode.overHTTP) })
	}
}

func removedLeavesTheCount(t *testing.T, overHTTP bool) {
	// How Down counts the dead agent's node, and what status says of it
	// and of the way out. An idle agent in TTL mode holds no session, so
	// what it leaves is its workload's TTL check, which expires.
	why, said := coordinator.DownWorkload, "workload down: its workload check is not passing (where its agent passes that check itself, "+
		"as with --health-addr=off, a stopped agent shows as this too)"
	wayOut := "its agent replaces it under its own slot while the gate is open; if the agent is stopped, " +
		"start it, or `rollagent node rm %s n3 --force` if the node left the group"
	if overHTTP {
		why, said = coordinator.DownAgent, "its agent does not answer"
		wayOut = "restart its agent, or `rollagent node rm %s n3 --force` if the node left the group"
	}
	g := groupkit.New(t, "noderm")
	c, st, group := g.Client, g.Store, g.Name
	bin := dockertest.BuildBinary(t, "./cmd/rollagent")
	wayOut = fmt.Sprintf(wayOut, group)
	v1 := commitRecording(t, st, group, "v1", "")
	rts := map[string]*scriptedRuntime{"n1": newScripted(v1), "n2": newScripted(v1)}
	for n, rt := range rts {
		startAgent(t, st, group, n, rt, agent.Allow{})
	}
	rt3 := newScripted(v1)
	kill := startKillable(t, g.Srv, group, "n3", rt3, overHTTP)
	for _, n := range []string{"n1", "n2", "n3"} {
		waitNode(t, st, group, n, "converged on v1", converged(v1))
	}
	// Killed before its service is in the catalog, n3 would leave nothing
	// there to count it down by.
	g.WaitFor(time.Minute, "n3's instance registered, its checks passing", func() bool {
		es, _, err := c.Health().Service(coordinator.ServiceName(group), "", false, nil)
		for _, e := range es {
			if e.Service.ID == coordinator.ServiceID(group, "n3") {
				return err == nil && e.Checks.AggregatedStatus() == api.HealthPassing
			}
		}
		return false
	})
	kill()
	awaitDownAfterKill(t, st, group, fmt.Sprintf("n3 down: %s", why), func(down map[string]coordinator.DownReason) bool {
		return len(down) == 1 && down["n3"] == why
	})
	inst, _, err := c.Catalog().Service(coordinator.ServiceName(group), "", nil)
	if err != nil || !slices.ContainsFunc(inst, func(s *api.CatalogService) bool { return s.ServiceID == coordinator.ServiceID(group, "n3") }) {
		ids := []string{}
		for _, s := range inst {
			ids = append(ids, s.ServiceID)
		}
		t.Fatalf("the catalog lists %v of the group's service (%v); want n3's dead instance in it", ids, err)
	}

	// Every version of the slot and of n1's and n2's records, as Consul
	// had them, from before the commit on.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	type seenHolders struct {
		at      time.Time
		using   []string
		counted []string
	}
	var slots []seenHolders
	followHolders(ctx, t, c, group, func(at time.Time, h *lockstep.Holders) {
		mu.Lock()
		defer mu.Unlock()
		s := seenHolders{at: at, using: groupkit.HolderNames(h)}
		if h != nil {
			s.counted = h.Counted()
		}
		slots = append(slots, s)
	})
	records := map[string]func() []coordinator.NodeState{"n1": followNode(t, c, g.Keys, "n1"), "n2": followNode(t, c, g.Keys, "n2")}

	v2 := commitRecording(t, st, group, "v2", "")
	waitInLine(t, g, []string{"n1", "n2"}, rts["n1"], rts["n2"])
	g.Steady(15*time.Second, 500*time.Millisecond, func() error {
		if down, err := st.Down(t.Context(), group); err != nil || down["n3"] != why {
			return fmt.Errorf("Down = %v, %v: n3 no longer counts", down, err)
		}
		if _, using := slotOf(t, st, group); len(using) != 0 {
			return fmt.Errorf("the slot is used by %v while n3 is down", using)
		}
		return nil
	})
	notReplaced(t, "while n3's agent is dead and its service registered", rts)
	statusSays(t, bin, g.Srv.HTTPAddr, group, "node n3 is down ("+said+"): it counts against max_parallel; "+wayOut)

	if out, err := exec.Command(bin, "--consul-addr="+g.Srv.HTTPAddr, "node", "rm", group, "n3").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "is registered in Consul's catalog") {
		t.Fatalf("node rm without --force of a node whose dead agent is registered: %v\n%s", err, out)
	}
	if nodeState(t, st, group, "n3") == nil {
		t.Fatal("a refused node rm removed n3's record")
	}
	removed := time.Now()
	if out, err := exec.Command(bin, "--consul-addr="+g.Srv.HTTPAddr, "node", "rm", group, "n3", "--force",
		"--reason", "host decommissioned").CombinedOutput(); err != nil {
		t.Fatalf("node rm --force: %v\n%s", err, out)
	}
	convergedOn(t, st, group, v2, rts, removed, []string{"n1", "n2"}, "n3 was removed")
	if len(rt3.replaces()) != 0 || nodeState(t, st, group, "n3") != nil {
		t.Fatalf("n3, removed and dead, was replaced (%v) or has a record", rt3.replaces())
	}
	if p, _, err := c.KV().Get(g.Keys.Removed("n3"), nil); err != nil || p == nil {
		t.Fatalf("no removal mark for n3: %v", err)
	}
	log, err := st.Events(t.Context(), group)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(log.Events, func(e coordinator.LoggedEvent) bool {
		return e.Kind == coordinator.EventNodeRemoved && e.Node == "n3" && strings.HasPrefix(e.Reason, "host decommissioned")
	}) {
		t.Fatalf("the removal is not in the event log: %+v", log.Events)
	}
	mu.Lock()
	for _, s := range slots {
		if len(s.using) > 1 || len(s.counted) > 1 || s.at.Before(removed) && (len(s.using) > 0 || len(s.counted) > 0) {
			mu.Unlock()
			t.Fatalf("at %s the slot was used by %v (claims counted %v); removed at %s, K = 1",
				s.at.Format(time.StampMilli), s.using, s.counted, removed.Format(time.StampMilli))
		}
	}
	mu.Unlock()
	for n, seen := range records {
		for _, r := range seen() {
			if r.Since.Before(removed) && (r.SHA != v1 || r.State != coordinator.StateConverged && r.State != coordinator.StateWaiting) {
				t.Fatalf("%s's record said %s on %s at %s, before n3 was removed", n, r.State, coordinator.ShortSHA(r.SHA), r.Since)
			}
		}
	}

	// Its agent back: the record written again, the node counts and is
	// replaced under the slot like any other.
	back := time.Now()
	startKillable(t, g.Srv, group, "n3", rt3, overHTTP)
	waitNode(t, st, group, "n3", "converged on v2", converged(v2))
	if r := rt3.replaces(); len(r) != 1 || r[0].Before(back) {
		t.Fatalf("n3 back was replaced at %v; want once, after %s", r, back.Format(time.StampMilli))
	}
	// Its checks, critical since the kill, pass again at Consul's next run.
	g.WaitFor(time.Minute, "no node down, n3 back", func() bool {
		down, err := st.Down(t.Context(), group)
		return err == nil && len(down) == 0
	})
}

// startKillable runs node's agent on a client of its own, showing it
// answers by its session's TTL check, or, overHTTP, by its alive and
// health checks served over loopback and run by Consul, as
// --health-addr=auto does. kill ends it as a SIGKILL would: nothing more
// of it reaches Consul, its checks stop answering, and its service stays
// in the catalog with them.
func startKillable(t *testing.T, srv *consultest.Server, group, node string, rt *scriptedRuntime, overHTTP bool) (kill func()) {
	t.Helper()
	cl, f := srv.FaultyClient()
	cfg := agent.Config{Group: group, Node: node, Store: coordinator.NewStore(cl, ""), Runtime: rt, Resync: time.Hour}
	var hs *httptest.Server
	if overHTTP {
		mux := http.NewServeMux()
		mux.Handle("/health", agent.HealthHandler(rt))
		mux.Handle("/alive", agent.AliveHandler())
		hs = httptest.NewServer(mux)
		t.Cleanup(hs.Close)
		cfg.HealthURL, cfg.AliveURL = hs.URL+"/health", hs.URL+"/alive"
	}
	p := startAgentWith(t, cfg)
	return func() {
		f.Cut(true)
		if hs != nil {
			hs.Close()
		}
		p.stop(t)
	}
}

// statusSays fails the test unless `rollagent status` of group says want.
func statusSays(t *testing.T, bin, addr, group, want string) {
	t.Helper()
	out, err := exec.Command(bin, "--consul-addr="+addr, "status", group).CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("status (%v) does not say %q:\n%s", err, want, out)
	}
}

// Issue 28, item 7, as reported: n3's agent, in line for the slot of a
// rollout at K = 1 and so holding a session, is killed for good; its
// session's TTL check on the group's service stays critical in the
// catalog. Once the holder is done no other node is granted, and `node rm
// --force` removes n3's record: the removal mark, not the record's delete
// alone, takes it out of the count, and the last node is replaced.
func TestANodeKilledInLineLeavesTheCountOnceRemoved(t *testing.T) {
	g := groupkit.New(t, "nodermline")
	c, st, group := g.Client, g.Store, g.Name
	bin := dockertest.BuildBinary(t, "./cmd/rollagent")
	v1 := commitRecording(t, st, group, "v1", "")
	hold := make(chan struct{})
	rts := map[string]*scriptedRuntime{"n1": newScripted(v1), "n2": newScripted(v1)}
	for n, rt := range rts {
		rt.hold = hold
		startAgent(t, st, group, n, rt, agent.Allow{})
		waitNode(t, st, group, n, "converged on v1", converged(v1))
	}
	v2 := commitRecording(t, st, group, "v2", "")
	var first, last string
	g.WaitFor(time.Minute, "a first replacement to begin", func() bool {
		for n, rt := range rts {
			if len(rt.replaces()) > 0 {
				first = n
			} else {
				last = n
			}
		}
		return first != "" && last != ""
	})
	rt3 := newScripted(v1)
	kill := startKillable(t, g.Srv, group, "n3", rt3, false)
	g.WaitFor(time.Minute, "n3 and "+last+" in line, n3's instance registered with its session's check", func() bool {
		inLine, _ := slotOf(t, st, group)
		es, _, err := c.Health().Service(coordinator.ServiceName(group), "", false, nil)
		for _, e := range es {
			if e.Service.ID == coordinator.ServiceID(group, "n3") {
				session := slices.ContainsFunc(e.Checks, func(h *api.HealthCheck) bool {
					return h.ServiceID == e.Service.ID && h.CheckID != coordinator.WorkloadCheckID(group, "n3")
				})
				return err == nil && session && e.Checks.AggregatedStatus() == api.HealthPassing &&
					slices.Contains(inLine, "n3") && slices.Contains(inLine, last)
			}
		}
		return false
	})
	kill()
	awaitDownAfterKill(t, st, group, "n3 down, its agent not answering, and out of line", func(down map[string]coordinator.DownReason) bool {
		inLine, _ := slotOf(t, st, group)
		return down["n3"] == coordinator.DownAgent && !slices.Contains(inLine, "n3")
	})
	close(hold)
	waitNode(t, st, group, first, "converged on v2", converged(v2))
	g.Steady(10*time.Second, 500*time.Millisecond, func() error {
		if _, using := slotOf(t, st, group); len(using) != 0 {
			return fmt.Errorf("the slot is used by %v while n3 is down", using)
		}
		if r := rts[last].replaces(); len(r) != 0 {
			return fmt.Errorf("%s was replaced while n3 is down", last)
		}
		if n := nodeState(t, st, group, last); n == nil || n.SHA != v1 {
			return fmt.Errorf("%s's record says %+v while n3 is down", last, n)
		}
		return nil
	})
	statusSays(t, bin, g.Srv.HTTPAddr, group, "node n3 is down (its agent does not answer): it counts against max_parallel; "+
		"restart its agent, or `rollagent node rm "+group+" n3 --force` if the node left the group")
	removed := time.Now()
	if out, err := exec.Command(bin, "--consul-addr="+g.Srv.HTTPAddr, "node", "rm", group, "n3", "--force",
		"--reason", "host decommissioned").CombinedOutput(); err != nil {
		t.Fatalf("node rm --force: %v\n%s", err, out)
	}
	waitNode(t, st, group, last, "converged on v2", converged(v2))
	if r := rts[last].replaces(); len(r) != 1 || r[0].Before(removed) {
		t.Fatalf("%s was replaced at %v; want once, after n3 was removed at %s", last, r, removed.Format(time.StampMilli))
	}
	if len(rt3.replaces()) != 0 {
		t.Fatal("n3, killed in line, was replaced")
	}
}

// awaitDownAfterKill waits a minute at most for Down to show what killing
// n3's agent left, as ok judges it; want says what that is.
func awaitDownAfterKill(t *testing.T, st *coordinator.Store, group, want string, ok func(map[string]coordinator.DownReason) bool) {
	t.Helper()
	var down map[string]coordinator.DownReason
	if !testkit.Poll(time.Minute, func() bool {
		var err error
		down, err = st.Down(t.Context(), group)
		return err == nil && ok(down)
	}) {
		t.Fatalf("Down = %v a minute after n3's agent was killed; want %s", down, want)
	}
}
