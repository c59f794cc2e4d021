package integration

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/lockstep"
)

type workload = fleettest.Workload

func (c *cluster) workloads(group string) map[string]workload {
	return fleettest.Workloads(c.t, c.docker, group)
}

// downOf returns the nodes of nodes whose workload is unavailable in ws,
// and why. Unavailable is Docker's own word: the container under the
// node's managed name absent, not running, or running without the health
// status "healthy" ("starting" and "unhealthy" are down). A container that
// runs with failing probes is down, whatever it was before: the guarantee
// is about every way a node goes down (issue 25, items 2 and 3).
func downOf(ws map[string]workload, nodes []string) (down, why []string) {
	for _, n := range nodes {
		if w := ws[n]; !w.Healthy {
			down = append(down, n)
			why = append(why, fmt.Sprintf("%s %q", n, w.Status))
		}
	}
	return down, why
}

// slot is the lockstep prefix of group, as the agents name it.
func (c *cluster) slot(group string) string {
	k, err := coordinator.NewKeys("", group)
	if err != nil {
		c.t.Fatal(err)
	}
	return k.Slot()
}

// monitor samples every group's workloads and slot holders every 200ms and
// keeps the worst: the invariant is at most K down and at most K holding,
// counting every node of the group, a dead one too. Nothing is left out:
// a node that died mid-replacement is down because of the rollout, and the
// rollout must not take a second one down beside it.
type monitor struct {
	c       *cluster
	slots   map[string]string // group -> slot prefix, computed once
	mu      sync.Mutex
	samples int
	down    map[string]int
	holders map[string]int
	worst   map[string]string // group -> the first sample with the most down
	changes []string          // each change of a group's down set, bounded, printed on a violation
	last    map[string]string
	stop    chan struct{}
	done    chan struct{}
}

func (c *cluster) monitor() *monitor {
	m := &monitor{c: c, slots: map[string]string{}, down: map[string]int{}, holders: map[string]int{},
		worst: map[string]string{}, last: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, g := range c.nodes {
		m.slots[g] = c.slot(g)
	}
	go m.loop()
	return m
}

func (m *monitor) loop() {
	defer close(m.done)
	start := time.Now()
	groups := map[string][]string{}
	for n, g := range m.c.nodes {
		groups[g] = append(groups[g], n)
	}
	for {
		for g, ns := range groups {
			m.sample(g, ns, time.Since(start))
		}
		m.mu.Lock()
		m.samples++
		m.mu.Unlock()
		select {
		case <-m.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sample counts g's nodes whose workload Docker does not see healthy under
// its managed name, absent ones included.
func (m *monitor) sample(g string, ns []string, at time.Duration) {
	ws, err := fleettest.ListWorkloads(m.c.docker, g)
	if err != nil {
		return // Docker itself failing is not the rollout's doing; the next sample counts
	}
	down, why := downOf(ws, ns)
	held := -1
	if h, err := lockstep.ReadHolders(m.c.api(), m.slots[g], nil); err == nil {
		held = len(h.Holding)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(down) > m.down[g] {
		m.worst[g] = fmt.Sprintf("at +%s: %v down: %s", at.Round(100*time.Millisecond), down, strings.Join(why, "; "))
	}
	if line := fmt.Sprintf("%s down %v", g, down); line != m.last[g] && len(m.changes) < 500 {
		m.last[g] = line
		m.changes = append(m.changes, fmt.Sprintf("+%s %s: %s", at.Round(100*time.Millisecond), line, strings.Join(why, "; ")))
	}
	m.down[g] = max(m.down[g], len(down))
	m.holders[g] = max(m.holders[g], held)
}

// finish stops sampling, prints the counts and checks them against k.
func (m *monitor) finish(t *testing.T, k int) {
	t.Helper()
	close(m.stop)
	<-m.done
	var parts []string
	for g := range m.down {
		parts = append(parts, fmt.Sprintf("%s: max down %d, max holders %d", g, m.down[g], m.holders[g]))
	}
	t.Logf("invariant monitor: %d samples; %s (K=%d)", m.samples, strings.Join(parts, "; "), k)
	for g := range m.down {
		if m.down[g] > k || m.holders[g] > k {
			t.Errorf("group %s: %d down and %d holders at worst (first worst sample %s), K=%d", g, m.down[g], m.holders[g], m.worst[g], k)
		}
	}
	if t.Failed() || os.Getenv("MONITOR_VERBOSE") != "" {
		t.Logf("down-set changes:\n%s", strings.Join(m.changes, "\n"))
	}
}
