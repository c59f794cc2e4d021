package fleetwatch

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

const (
	// DefaultEvery is the time between two samples of a group.
	DefaultEvery = 200 * time.Millisecond
	// DefaultReadTimeout bounds one read of a sample, Docker's or Consul's.
	DefaultReadTimeout = 10 * time.Second
	// maxChanges bounds the down-set changes a group keeps for its report.
	maxChanges = 500
)

// Options configure a Monitor.
type Options struct {
	// Groups lists every node of each group watched. Each counts whatever
	// it is doing: a node that died mid-step is down because of the
	// rollout, and the rollout must not take another down beside it.
	Groups map[string][]string
	// Probe reads a group's workloads. Optional: with none, a sample is
	// Consul's state alone.
	Probe Probe
	// Probes overrides Probe for the groups it names (exec hosts). Optional.
	Probes map[string]Probe
	// Domains gives each group's nodes their topology domain (a zone, a
	// rack: what update.max_parallel_per spreads over), by group and node,
	// for a bound per domain (Bounds.DownInDomain). Optional: a group it
	// leaves out is not counted by domain.
	Domains map[string]map[string]string
	// Down judges a node's workload. Optional, defaults to Unhealthy.
	Down Judge
	// State reads a group's state from Consul. Optional: with none, slot
	// holders and node records are not counted.
	State func(ctx context.Context, group string) (*coordinator.GroupState, error)
	// Observe sees each sample after it is counted, on the monitor's
	// goroutine, for checks a bound on the worst sample cannot express.
	// Optional.
	Observe func(*Sample)
	// Every is the time between two samples of a group. Optional, defaults
	// to DefaultEvery.
	Every time.Duration
	// ProbeTimeout bounds a probe. Optional, defaults to DefaultReadTimeout.
	ProbeTimeout time.Duration
	// StateTimeout bounds a read of Consul's state. Optional, defaults to
	// DefaultReadTimeout.
	StateTimeout time.Duration
	// Verbose has Finish print the down-set changes of a test that passes
	// too. Optional, defaults to false: they are printed when it failed.
	Verbose bool
}

// Sample is one look at a group.
type Sample struct {
	Group string
	At    time.Duration // since the monitor started
	// Workloads is what the probe read, by node; nil when it failed
	// (ProbeErr) or there is no probe.
	Workloads map[string]Workload
	ProbeErr  error
	// State is the group's KV state; nil when Consul did not answer
	// (StateErr), the probe failed, or there is no State.
	State    *coordinator.GroupState
	StateErr error
	// StateFrom and StateTo are the wall clock around the State read: the
	// state is as it was at some instant between them, after the probe's.
	StateFrom, StateTo time.Time
	// Down are the group's nodes whose workload is down, in the order of
	// Options.Groups, and Why each is, in the probe's words.
	Down, Why []string
}

// Monitor samples groups until stopped and keeps each one's worst.
type Monitor struct {
	o      Options
	groups []string
	start  time.Time

	mu     sync.Mutex
	rounds int
	tally  map[string]*Tally
	last   map[string]string // group -> its last down set, for Changes

	stop chan struct{}
	once sync.Once
	done chan struct{}
}

// Start starts sampling. Stop or Finish ends it.
func Start(o Options) *Monitor {
	if o.Down == nil {
		o.Down = Unhealthy
	}
	o.Every = cmp.Or(o.Every, DefaultEvery)
	o.ProbeTimeout = cmp.Or(o.ProbeTimeout, DefaultReadTimeout)
	o.StateTimeout = cmp.Or(o.StateTimeout, DefaultReadTimeout)
	m := &Monitor{o: o, start: time.Now(), tally: map[string]*Tally{}, last: map[string]string{},
		stop: make(chan struct{}), done: make(chan struct{})}
	for g := range o.Groups {
		m.groups = append(m.groups, g)
		m.tally[g] = &Tally{MaxHolding: -1, MaxBusy: -1, probed: m.probe(g) != nil}
		if dom, ok := o.Domains[g]; ok {
			m.tally[g].domains = true
			for _, n := range o.Groups[g] {
				if dom[n] == "" {
					m.tally[g].undomained = append(m.tally[g].undomained, n)
				}
			}
		}
	}
	sort.Strings(m.groups)
	go m.loop()
	return m
}

// Stop ends sampling and waits for the sample under way. It may be called
// more than once.
func (m *Monitor) Stop() {
	m.once.Do(func() { close(m.stop) })
	<-m.done
}

// Rounds is how many times every group was sampled.
func (m *Monitor) Rounds() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rounds
}

// Tally is group's count so far.
func (m *Monitor) Tally(group string) Tally {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := *m.tally[group]
	t.Changes = slices.Clone(t.Changes)
	return t
}

func (m *Monitor) loop() {
	defer close(m.done)
	for {
		for _, g := range m.groups {
			m.sample(g)
		}
		m.mu.Lock()
		m.rounds++
		m.mu.Unlock()
		select {
		case <-m.stop:
			return
		case <-time.After(m.o.Every):
		}
	}
}

func (m *Monitor) probe(group string) Probe {
	if p, ok := m.o.Probes[group]; ok {
		return p
	}
	return m.o.Probe
}

// sample reads group, counts it and hands it to Observe. When the probe
// fails Consul is not read: Docker itself failing is not the rollout's
// doing, and the next sample counts.
func (m *Monitor) sample(group string) {
	s := &Sample{Group: group, At: time.Since(m.start)}
	nodes := m.o.Groups[group]
	if p := m.probe(group); p != nil {
		ctx, cancel := context.WithTimeout(context.Background(), m.o.ProbeTimeout)
		s.Workloads, s.ProbeErr = p(ctx, group, nodes)
		cancel()
		if s.ProbeErr != nil {
			s.Workloads = nil
		} else {
			s.Down, s.Why = DownOf(s.Workloads, nodes, m.o.Down)
		}
	}
	if m.o.State != nil && s.ProbeErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), m.o.StateTimeout)
		s.StateFrom = time.Now()
		s.State, s.StateErr = m.o.State(ctx, group)
		s.StateTo = time.Now()
		cancel()
		if s.StateErr != nil {
			s.State = nil
		}
	}
	m.count(s)
	if m.o.Observe != nil {
		m.o.Observe(s)
	}
}

// DownOf returns the nodes of nodes whose workload in ws is down by judge,
// and why, in Docker's (or the probe's) words. A node absent from ws is
// down: every node counts.
func DownOf(ws map[string]Workload, nodes []string, judge Judge) (down, why []string) {
	for _, n := range nodes {
		if w := ws[n]; judge(w) {
			down = append(down, n)
			why = append(why, fmt.Sprintf("%s %q", n, w.Status))
		}
	}
	return down, why
}

// ByDomain groups down by the domain domainOf gives each node; a node it
// gives none is under "".
func ByDomain(down []string, domainOf map[string]string) map[string][]string {
	out := map[string][]string{}
	for _, n := range down {
		out[domainOf[n]] = append(out[domainOf[n]], n)
	}
	return out
}

// countDomains keeps the most down in one domain of s's group, and the
// first sample that saw it. Domains are taken in order, so that which of
// two equally bad domains a report names does not depend on map order.
func (m *Monitor) countDomains(t *Tally, s *Sample, at time.Duration, why string) {
	byDomain := ByDomain(s.Down, m.o.Domains[s.Group])
	for _, d := range slices.Sorted(maps.Keys(byDomain)) {
		if ns := byDomain[d]; len(ns) > t.MaxDownInDomain {
			t.MaxDownInDomain, t.WorstDomain = len(ns), fmt.Sprintf("at +%s: %s has %v down: %s", at, d, ns, why)
		}
	}
}

// busy counts the records of a node in the middle of a step.
func busy(gs *coordinator.GroupState) int {
	n := 0
	for _, ns := range gs.Nodes {
		if ns.State == coordinator.StateReplacing || ns.State == coordinator.StateVerifying {
			n++
		}
	}
	return n
}

func (m *Monitor) count(s *Sample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, probed := m.tally[s.Group], m.probe(s.Group) != nil
	if s.ProbeErr != nil || s.StateErr != nil {
		t.Unanswered++
	}
	if s.ProbeErr != nil || !probed && s.State == nil {
		return // nothing read
	}
	t.Samples++
	if s.State != nil {
		if h := s.State.Holders; h != nil {
			t.MaxHolding = max(t.MaxHolding, len(h.Holding))
		}
		t.MaxBusy = max(t.MaxBusy, busy(s.State))
	}
	if !probed {
		return
	}
	at, why := s.At.Round(100*time.Millisecond), strings.Join(s.Why, "; ")
	if len(s.Down) > t.MaxDown {
		t.MaxDown, t.Worst = len(s.Down), fmt.Sprintf("at +%s: %v down: %s", at, s.Down, why)
	}
	if t.domains {
		m.countDomains(t, s, at, why)
	}
	if line := fmt.Sprintf("%s down %v", s.Group, s.Down); line != m.last[s.Group] && len(t.Changes) < maxChanges {
		m.last[s.Group] = line
		t.Changes = append(t.Changes, fmt.Sprintf("+%s %s: %s", at, line, why))
	}
}
