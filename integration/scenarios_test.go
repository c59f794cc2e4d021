package integration

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleettest"
)

var (
	managers = []string{"m1", "m2", "m3"}
	workers  = []string{"w1", "w2", "w3"}
	// The group names, unique per test process: see fleettest.Group.
	mgrs = fleettest.Group("managers")
	wkrs = fleettest.Group("workers")
)

// testHealthyDeadline is short, so that the lease of a holder that never
// comes back (grant + healthy_deadline + grace) runs out in test time.
const testHealthyDeadline = 30 * time.Second

// The cluster's 15 containers share the machine's 2 cores with whatever
// else runs there; a probe exec'd by Docker can take seconds, and with
// fleettest's 1s timeout a good release failed its health check.
const (
	probeTimeout = 5 * time.Second
	probeRetries = 3
)

func (c *cluster) store() *coordinator.Store { return coordinator.NewStore(c.api(), "") }

func (c *cluster) commit(group, release, action string) string {
	c.t.Helper()
	env := map[string]string{}
	if release == "bad" {
		env["DEMOAPP_UNHEALTHY"] = "1"
	}
	spec := fleettest.Spec(c.t, fleettest.SpecOptions{Group: group, Image: c.releases.Image(release, env),
		MaxParallel: 1, FailureAction: action, MaxFailures: 1, HealthyDeadline: testHealthyDeadline,
		ProbeTimeout: probeTimeout, ProbeRetries: probeRetries})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.store().Commit(ctx, group, spec, "integration", "commit")
	if err != nil {
		c.t.Fatal(err)
	}
	return res.SHA
}

func (c *cluster) state(group string) *coordinator.GroupState {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := c.store().Read(ctx, group, nil)
	if err != nil {
		return &coordinator.GroupState{}
	}
	return gs
}

// running says every node of nodes runs exactly one healthy container of sha.
func (c *cluster) running(group string, nodes []string, sha string) bool {
	return fleettest.Running(c.workloads(group), nodes, sha)
}

func (c *cluster) converged(group string, nodes []string, sha string) bool {
	if !c.running(group, nodes, sha) {
		return false
	}
	done := 0
	for _, n := range c.state(group).Nodes {
		if n.SHA == sha && n.State == coordinator.StateConverged {
			done++
		}
	}
	return done == len(nodes)
}

func (c *cluster) waitConverged(group string, nodes []string, sha string, d time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	c.waitFor(d, group+" to converge on "+sha[:12], func() bool { return c.converged(group, nodes, sha) })
	return time.Since(start)
}

// holder waits for a node of group to hold the slot, other than not.
func (c *cluster) holder(group, not string, d time.Duration) string {
	c.t.Helper()
	name := ""
	c.waitFor(d, "a slot holder in "+group, func() bool {
		holding, err := c.holding(group)
		if err != nil {
			return false
		}
		for _, e := range holding {
			if e.Name != not {
				name = e.Name
				return true
			}
		}
		return false
	})
	return name
}

func (c *cluster) containerIDs(group string) []string {
	var ids []string
	for _, w := range c.workloads(group) {
		ids = append(ids, w.IDs...)
	}
	sort.Strings(ids)
	return ids
}

func TestCluster(t *testing.T) {
	var c *cluster
	// Registered first, so it runs last: a failure's verdict is then the
	// end of the output, not lost above the logs that dumpLogs prints.
	t.Cleanup(func() {
		if c != nil && t.Failed() && len(c.verdicts) > 0 {
			t.Logf("verdicts, again below the logs:\n%s", strings.Join(c.verdicts, "\n"))
		}
	})
	c = newCluster(t)
	t.Cleanup(c.dumpLogs)
	for _, n := range managers {
		c.addNode(n, mgrs)
	}
	for _, n := range workers {
		c.addNode(n, wkrs)
	}
	m1, w1 := c.commit(mgrs, "v1", "pause"), c.commit(wkrs, "v1", "pause")
	c.waitConverged(mgrs, managers, m1, 3*time.Minute)
	c.waitConverged(wkrs, workers, w1, 3*time.Minute)
	t.Run("seed: holder node killed mid-replacement", c.seed)
	t.Run("seed order: managers one at a time, the leader last, then the workers", c.seedOrder)
	t.Run("holder node lost for good", c.holderLost)
	t.Run("consul leader killed mid-rollout", c.leaderKilled)
	t.Run("partitioned holder", c.partitioned)
	t.Run("cancel survives restart of every agent and server", c.cancelDurable)
	t.Run("bad release pauses, or rolls back", c.badRelease)
	t.Run("two groups roll independently", c.twoGroups)
	t.Run("nemesis", c.nemesisTest)
	t.Run("the documented Compose fleet", c.composeExample)
}
