package integration

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
)

// testClockTag builds the cluster's agents with the test clock
// (internal/wallclock), whose skew each reads from its environment.
const (
	testClockTag = "rollagent_testclock"
	envSkew      = "ROLLAGENT_TEST_CLOCK_SKEW" // wallclock.EnvSkew, in a file only that build has
	// maxSkew bounds the skew drawn for a host: as much as the time a node
	// gone from the catalog still counts (coordinator.DefaultLostAfter),
	// which README says skew shortens or lengthens.
	maxSkew = 10 * time.Minute
)

// skews draws a clock skew for each node from the seed, up to maxSkew
// either way, with about half the nodes ahead and half behind.
func skews(seed uint64, nodes []string) map[string]time.Duration {
	rng := rand.New(rand.NewPCG(seed, seed^0x5deece66d))
	order := append([]string{}, nodes...)
	sort.Strings(order)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	out := map[string]time.Duration{}
	for i, n := range order {
		d := time.Duration(rng.Int64N(int64(maxSkew))).Round(time.Second)
		if i%2 == 1 {
			d = -d
		}
		out[n] = d
	}
	return out
}

// skewClocks restarts every agent with its skew for this seed (the
// cluster is settled between seeds), and puts them back on the real clock
// when the run ends, for the scenarios after it.
func (n *nemesis) skewClocks() {
	sk := skews(n.seed, append(append([]string{}, managers...), workers...))
	var parts []string
	for _, nd := range append(append([]string{}, managers...), workers...) {
		parts = append(parts, fmt.Sprintf("%s %+v", nd, sk[nd]))
	}
	n.t.Logf("agents' clock skews: %s", strings.Join(parts, ", "))
	n.c.restartAgents(sk)
	n.t.Cleanup(func() { n.c.restartAgents(nil) })
}

// restartAgents recreates each Docker node's agent container with its
// clock skew (none for a node sk does not name). Exec hosts keep the real
// clock.
func (c *cluster) restartAgents(sk map[string]time.Duration) {
	c.t.Helper()
	for node, group := range c.nodes {
		if c.isExec(node) {
			// An exec host's agent is its init's child, not a container of
			// its own: a container here would be a second agent, on Docker.
			continue
		}
		ctx, cancel := c.ctx()
		err := c.docker.ContainerRemove(ctx, c.agentName(node), container.RemoveOptions{Force: true})
		cancel()
		if err != nil && !strings.Contains(err.Error(), "No such container") {
			c.t.Errorf("remove %s: %v", c.agentName(node), err)
			continue
		}
		var env []string
		if d := sk[node]; d != 0 {
			env = []string{envSkew + "=" + d.String()}
		}
		c.runAgent(node, group, env)
	}
}
