package integration

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

func (c *cluster) leaderKilled(t *testing.T) {
	defer c.judgeDown(t)()
	sha := c.commit(mgrs, "v3", "pause")
	c.holder(mgrs, "", time.Minute)
	leader := c.leader()
	c.kill(leader)
	t.Logf("killed the leading server %s mid-rollout", leader)
	d := c.waitConverged(mgrs, managers, sha, 3*time.Minute)
	t.Logf("rollout finished %s after the leader died", d.Round(100*time.Millisecond))
	c.start(leader)
	c.waitFor(2*time.Minute, "3 servers again", func() bool {
		peers, err := c.api().Status().Peers()
		return err == nil && len(peers) == 3
	})
}

// partitioned cuts the holder off mid-replacement. Its slot stays its own:
// it undoes its step locally (or finishes it) and releases once the
// partition heals, so the next node is expected only then. The victim
// counts in the down count all along.
func (c *cluster) partitioned(t *testing.T) {
	defer c.judgeDown(t)()
	sha := c.commit(wkrs, "v3", "pause")
	victim := c.midStep(wkrs, time.Minute)
	ip := c.partition(victim)
	cut := time.Now()
	if taken := c.watchOthers(wkrs, victim, partitionFor); taken != "" {
		t.Logf("while %s was cut off: %s", victim, taken) // the down count below is the assertion
	}
	c.heal(victim, ip)
	t.Logf("partitioned %s mid-replacement for %s, then healed", victim, time.Since(cut).Round(100*time.Millisecond))
	d := c.waitConverged(wkrs, workers, sha, 4*time.Minute)
	t.Logf("all workers converged %s after the partition healed", d.Round(100*time.Millisecond))
}

func (c *cluster) cancelDurable(t *testing.T) {
	defer c.judgeDown(t)()
	sha := c.commit(mgrs, "v4", "pause")
	c.holder(mgrs, "", time.Minute)
	ctx, cancel := c.ctx()
	if _, err := c.store().Cancel(ctx, mgrs, sha, "integration", "test"); err != nil {
		cancel()
		t.Fatal(err)
	}
	cancel()
	c.waitFor(time.Minute, "the in-flight step to end", func() bool { return c.stepEnded(mgrs) })
	before := c.containerIDs(mgrs)
	c.restartEverything()
	c.waitFor(2*time.Minute, "every manager's agent to report cancelled or converged", func() bool {
		ok := 0
		for _, n := range c.state(mgrs).Nodes {
			if n.State == coordinator.StateCancelled || (n.State == coordinator.StateConverged && n.SHA == sha) {
				ok++
			}
		}
		return ok == len(managers)
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if got := c.containerIDs(mgrs); !reflect.DeepEqual(got, before) {
			t.Fatalf("a container changed after the cancel: %v -> %v", before, got)
		}
	}
	next := c.commit(mgrs, "v5", "pause")
	d := c.waitConverged(mgrs, managers, next, 3*time.Minute)
	t.Logf("a new commit after the cancel rolled in %s", d.Round(100*time.Millisecond))
}

// stepEnded says the step in flight when group was cancelled has ended, in
// one of the two ways README's "Nothing moves after a CANCEL" gives. Its
// workload healthy, the node gave its slot back: a step the CANCEL cut off
// after its new workload was verified leaves the old one set aside, two
// containers, the managed one healthy. Its workload down (the CANCEL came
// between setting the old one aside and starting the new), the node
// touches nothing and keeps its slot, counted, until a new commit; its
// record says so.
func (c *cluster) stepEnded(group string) bool {
	gs := c.state(group)
	if gs.Holders == nil {
		return false
	}
	if len(gs.Holders.Holding) == 0 {
		for _, w := range c.workloads(group) {
			if !w.Healthy {
				return false
			}
		}
		return true
	}
	kept := 0
	for _, h := range gs.Holders.Holding {
		for _, n := range gs.Nodes {
			if n.Node == h.Name && n.State == coordinator.StateCancelled && strings.Contains(n.Error, "the workload is down, so the node keeps its slot") {
				kept++
			}
		}
	}
	return kept == 1 && len(gs.Holders.Holding) == 1
}

// restartEverything kills and starts every agent and every server.
func (c *cluster) restartEverything() {
	var agents []string
	for n := range c.nodes {
		agents = append(agents, c.agentName(n))
	}
	c.kill(agents...)
	c.kill(c.servers...)
	c.start(c.servers...)
	c.waitFor(2*time.Minute, "a leader after restarting every server", func() bool {
		l, err := c.api().Status().Leader()
		return err == nil && l != ""
	})
	c.start(agents...)
}

func (c *cluster) badRelease(t *testing.T) {
	defer c.judgeDown(t)()
	good := c.state(wkrs).Desired.SHA
	bad := c.commit(wkrs, "bad", "pause")
	c.waitFor(2*time.Minute, "the workers to pause", func() bool {
		gs := c.state(wkrs)
		return gs.Pause != nil && gs.Desired.SHA == bad && gs.Holders != nil && len(gs.Holders.Holding) == 0
	})
	c.waitFor(time.Minute, "every worker serving the good release", func() bool { return c.running(wkrs, workers, good) })
	if n := len(c.state(wkrs).Failures); n != 1 {
		t.Errorf("%d failures recorded, want 1 (max_failures=1)", n)
	}
	prev := c.state(mgrs).Desired.SHA
	c.commit(mgrs, "bad", "rollback")
	c.waitFor(3*time.Minute, "managers rolled back", func() bool {
		return c.state(mgrs).Desired.SHA == prev && c.converged(mgrs, managers, prev)
	})
}

func (c *cluster) twoGroups(t *testing.T) {
	defer c.judgeDown(t)()
	start := time.Now()
	ms, ws := c.commit(mgrs, "v6", "pause"), c.commit(wkrs, "v6", "pause")
	c.waitConverged(mgrs, managers, ms, 3*time.Minute)
	c.waitConverged(wkrs, workers, ws, 3*time.Minute)
	t.Logf("both groups on v6 %s after the commits", time.Since(start).Round(100*time.Millisecond))
}
