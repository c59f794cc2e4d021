package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/lockstep"
)

type workload = fleettest.Workload

func (c *cluster) workloads(group string) map[string]workload {
	return fleettest.Workloads(c.t, c.docker, group)
}

// monitor samples every group's workloads and slot holders every 200ms and
// keeps the worst: the invariant is at most K down and at most K holding.
type monitor struct {
	c       *cluster
	mu      sync.Mutex
	samples int
	down    map[string]int
	holders map[string]int
	// excluded nodes are dead on purpose: a holder killed mid-step leaves
	// its own node down until it is back, which no slot can prevent.
	excluded map[string]bool
	stop     chan struct{}
	done     chan struct{}
}

func (c *cluster) monitor() *monitor {
	m := &monitor{c: c, down: map[string]int{}, holders: map[string]int{}, excluded: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go m.loop()
	return m
}

func (m *monitor) loop() {
	defer close(m.done)
	groups := map[string][]string{}
	for n, g := range m.c.nodes {
		groups[g] = append(groups[g], n)
	}
	for {
		for g, ns := range groups {
			ws := m.c.workloads(g)
			down := 0
			m.mu.Lock()
			for _, n := range ns {
				if !ws[n].Healthy && !m.excluded[n] {
					down++
				}
			}
			m.mu.Unlock()
			held := -1
			if h, err := lockstep.ReadHolders(m.c.api(), "rollagent/groups/"+g+"/slot/", nil); err == nil {
				held = len(h.Holding)
			}
			m.mu.Lock()
			m.down[g] = max(m.down[g], down)
			m.holders[g] = max(m.holders[g], held)
			m.mu.Unlock()
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

// exclude leaves node out of the down count until include.
func (m *monitor) exclude(node string, out bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.excluded[node] = out
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
			t.Errorf("group %s: %d down and %d holders at worst, K=%d", g, m.down[g], m.holders[g], k)
		}
	}
}
