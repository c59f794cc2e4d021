package integration

import (
	"context"
	"maps"
	"os"
	"slices"
	"sort"
	"testing"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/fleetwatch"
	"github.com/rollagent/rollagent/lockstep"
)

type workload = fleettest.Workload

func (c *cluster) workloads(group string) map[string]workload {
	return fleettest.Workloads(c.t, c.docker, group)
}

// slot is the lockstep prefix of group, as the agents name it.
func (c *cluster) slot(group string) string {
	k, err := coordinator.NewKeys("", group)
	if err != nil {
		c.t.Fatal(err)
	}
	return k.Slot()
}

// holding lists who holds group's slot now, read under the prefix the
// coordinator names.
func (c *cluster) holding(group string) ([]lockstep.Entry, error) {
	h, err := lockstep.ReadHolders(c.api(), c.slot(group), nil)
	if err != nil {
		return nil, err
	}
	return slices.Collect(maps.Values(h.Holding)), nil
}

// groupNodes lists every node of group the cluster runs, a dead one too.
func (c *cluster) groupNodes(group string) []string {
	var out []string
	for n, g := range c.nodes {
		if g == group {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// watchOptions are the fleet invariant monitor's options for groups:
// Docker's containers, or on exec hosts the health hook's own check, and
// the group's KV state, every node of each group counted.
func (c *cluster) watchOptions(groups ...string) fleetwatch.Options {
	o := fleetwatch.Options{Groups: map[string][]string{}, Probe: c.probe(""), Probes: map[string]fleetwatch.Probe{hks: c.probe(hks)},
		State: func(ctx context.Context, group string) (*coordinator.GroupState, error) {
			return c.store().Read(ctx, group, nil)
		},
		Verbose: os.Getenv("MONITOR_VERBOSE") != ""}
	for _, g := range groups {
		o.Groups[g] = c.groupNodes(g)
	}
	return o
}

// probe reads what runs on group's nodes: Docker's containers, or on exec
// hosts their installs, judged by the health hook's own check.
func (c *cluster) probe(group string) fleetwatch.Probe {
	if group == hks {
		return fleetwatch.EachNode(func(_ context.Context, node string) workload {
			return c.execWorkload(node) // bounded by its own reads
		})
	}
	return fleetwatch.Docker(c.docker)
}

// listWorkloads is what runs on group's nodes, as the monitor reads it.
func (c *cluster) listWorkloads(group string) (map[string]workload, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fleetwatch.DefaultReadTimeout)
	defer cancel()
	return c.probe(group)(ctx, group, c.groupNodes(group))
}

// monitor samples every group's workloads and slot holders every 200ms and
// keeps the worst: the invariant, checked by its Finish with
// fleetwatch.AtMost(K), is at most K down and at most K holding, counting
// every node of the group, a dead one too. Nothing is left out: a node
// that died mid-replacement is down because of the rollout, and the
// rollout must not take a second one down beside it.
func (c *cluster) monitor() *fleetwatch.Monitor {
	groups := map[string]bool{}
	for _, g := range c.nodes {
		groups[g] = true
	}
	return fleetwatch.Start(c.watchOptions(slices.Sorted(maps.Keys(groups))...))
}

// judgeDown starts the invariant monitor and returns what judges it: at
// most one node down at once. A scenario defers that call, so that the
// down count is the verdict also when a wait gives up.
func (c *cluster) judgeDown(t *testing.T) (judge func()) {
	mon := c.monitor()
	return func() {
		t.Helper() // Finish's tally names the scenario's line, not this one
		mon.Finish(t, fleetwatch.AtMost(1))
	}
}
