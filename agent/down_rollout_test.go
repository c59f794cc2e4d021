package agent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
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
	for _, n := range []string{"n1", "n2", "n3"} {
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
