package integration

import (
	"fmt"
	"os"
	"slices"
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

// upTracker tells a node taken down from a health probe that timed out:
// on a loaded machine (2 cores shared with other test runs) Docker marks
// long-running containers unhealthy now and then, several at once, with no
// rollout in sight. A node is down when the container under its managed
// name is absent, not running, or has not been seen healthy since it last
// started; a container seen healthy that keeps running counts as up
// through a failed probe. Every way a rollout takes a node down (stop,
// rename, a new container, a restored one started again) and a killed
// workload stay down by this rule until Docker says healthy.
type upTracker struct {
	healthy map[string]bool // container ID -> seen healthy since it last ran
}

// newUpTracker starts from ws, taken where the group is known to have
// converged (every scenario starts there): a managed container that runs
// then counts as seen healthy, so that a probe failing at the first look
// is not a node down.
func newUpTracker(ws map[string]workload) *upTracker {
	u := &upTracker{healthy: map[string]bool{}}
	for _, w := range ws {
		if w.Managed != "" && len(w.IDs) == 1 && slices.Contains(w.Running, w.Managed) {
			u.healthy[w.Managed] = true
		}
	}
	return u
}

// down returns the nodes of nodes that are down in ws, and why.
func (u *upTracker) down(ws map[string]workload, nodes []string) (down, why []string) {
	for _, w := range ws {
		for _, id := range w.IDs {
			if !slices.Contains(w.Running, id) {
				delete(u.healthy, id)
			}
		}
	}
	for _, n := range nodes {
		w := ws[n]
		if w.Healthy {
			u.healthy[w.Managed] = true
			continue
		}
		if w.Managed != "" && slices.Contains(w.Running, w.Managed) && u.healthy[w.Managed] {
			continue // a failed probe of a container that was healthy and never stopped
		}
		down = append(down, n)
		why = append(why, fmt.Sprintf("%s %q", n, w.Status))
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
	up      *upTracker
	stop    chan struct{}
	done    chan struct{}
}

func (c *cluster) monitor() *monitor {
	m := &monitor{c: c, slots: map[string]string{}, down: map[string]int{}, holders: map[string]int{},
		worst: map[string]string{}, last: map[string]string{}, up: newUpTracker(nil), stop: make(chan struct{}), done: make(chan struct{})}
	for _, g := range c.nodes {
		m.slots[g] = c.slot(g)
		for n, w := range newUpTracker(c.workloads(g)).healthy {
			m.up.healthy[n] = w
		}
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
	down, why := m.up.down(ws, ns)
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
