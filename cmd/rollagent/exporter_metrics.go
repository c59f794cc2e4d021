package main

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rollagent/rollagent/coordinator"
)

// groupObservation is what the group metrics say of one group at one time.
type groupObservation struct {
	Gate      coordinator.GateState
	Committed bool
	Nodes     map[coordinator.Standing]int // how status counts each node
	// LastConverged is the latest of the commit and of the times a node
	// converged on the desired SHA: the last sign of progress. Zero when
	// nothing is committed.
	LastConverged time.Time
	Behind        int // nodes that count and are not converged on the desired SHA
	Stalled       bool
	MaxParallel   int // the policy's K, while the gate is closed too: a percentage's number now
	// DeadlinePassed: the desired commit's progress deadline passed.
	DeadlinePassed bool
}

// observe is the one place that reads the status document for the metrics,
// so that metrics and `status -o json` never disagree.
func observe(s statusJSON) groupObservation {
	o := groupObservation{Gate: groupGate(s), Committed: s.Desired != nil, Nodes: s.Progress.ByState,
		Behind: s.Progress.Total - s.Progress.Converged, Stalled: s.Stall != nil, MaxParallel: s.Gate.MaxParallel}
	o.DeadlinePassed = s.Deadline != nil && s.Deadline.Passed
	if s.Desired == nil {
		return o
	}
	o.LastConverged = s.Desired.CommittedAt
	for _, n := range s.Nodes {
		if n.CountedAs == coordinator.StandingConverged && n.Since != nil && n.Since.After(o.LastConverged) {
			o.LastConverged = *n.Since
		}
	}
	return o
}

// groupGate is the group's gate state for the metric: status's, but
// waiting_to_go_last while it is open and a node waits to go last
// (waiting_to_go_last[]). update.last holds a node, never the group, so a
// reader of the whole group sees the gate open from the commit until the
// leader's turn: without this the state would never be exported, and an
// alert could not tell a leader waiting for the rest from a group open to
// every node.
func groupGate(s statusJSON) coordinator.GateState {
	if s.Gate.State == coordinator.GateOpen && len(s.GoLast) > 0 {
		return coordinator.GateWaitingToGoLast
	}
	return s.Gate.State
}

// groupDescs describe the exporter's metrics, each labelled by group.
var groupDescs = struct {
	gate, nodes, sinceConverged, behind, stalled, maxParallel, deadline, up, readErrors *prometheus.Desc
}{
	gate: prometheus.NewDesc("rollagent_group_gate",
		"1 for the state the group's gate is in, 0 for every other state.", []string{"group", "state"}, nil),
	nodes: prometheus.NewDesc("rollagent_group_nodes",
		"Nodes of the group by how rollagent status counts them (progress.by_state).", []string{"group", "state"}, nil),
	sinceConverged: prometheus.NewDesc("rollagent_group_seconds_since_converged",
		"Seconds since a node last converged on the desired SHA, or since the commit if none has since.", []string{"group"}, nil),
	behind: prometheus.NewDesc("rollagent_group_nodes_behind",
		"Nodes not converged on the desired SHA.", []string{"group"}, nil),
	stalled: prometheus.NewDesc("rollagent_group_stalled",
		"1 while the rollout is stalled: nodes wait behind an open gate with a slot free and nothing changes (see rollagent status).", []string{"group"}, nil),
	maxParallel: prometheus.NewDesc("rollagent_group_max_parallel",
		"The policy's max_parallel (K) as a number of nodes, while the gate is closed too: a percentage as it rounds for the group now.", []string{"group"}, nil),
	deadline: prometheus.NewDesc("rollagent_group_progress_deadline_passed",
		"1 once the progress deadline of the desired commit passed (update.progress_deadline), whatever failure_action did.", []string{"group"}, nil),
	up: prometheus.NewDesc("rollagent_group_up",
		"1 when the exporter's last read of the group from Consul succeeded.", []string{"group"}, nil),
	readErrors: prometheus.NewDesc("rollagent_group_read_errors_total",
		"Failed reads of the group from Consul.", []string{"group"}, nil),
}

// groupRecord is the exporter's latest knowledge of one group.
type groupRecord struct {
	state  *coordinator.GroupState // last successful read; nil before one
	up     bool
	errors uint64
}

// groupCollector exports the group metrics of the latest read of each group,
// computed at scrape time so that the clocks in them are current.
type groupCollector struct {
	now       func() time.Time
	lostAfter time.Duration // --lost-after
	mu        sync.Mutex
	groups    map[string]*groupRecord
}

func newGroupCollector(groups []string, lostAfter time.Duration, now func() time.Time) *groupCollector {
	c := &groupCollector{now: now, lostAfter: lostAfter, groups: map[string]*groupRecord{}}
	for _, g := range groups {
		c.groups[g] = &groupRecord{}
	}
	return c
}

// read records a successful read of gs.Group.
func (c *groupCollector) read(gs *coordinator.GroupState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.groups[gs.Group]
	r.state, r.up = gs, true
}

// failed records a failed read of group; its last state stays exported.
func (c *groupCollector) failed(group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.groups[group]
	r.up = false
	r.errors++
}

// Describe sends every metric's description.
func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	d := groupDescs
	for _, desc := range []*prometheus.Desc{d.gate, d.nodes, d.sinceConverged, d.behind, d.stalled, d.maxParallel, d.deadline, d.up, d.readErrors} {
		ch <- desc
	}
}

// Collect sends the metrics of every group.
func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	snap := make(map[string]groupRecord, len(c.groups))
	for g, r := range c.groups {
		snap[g] = *r
	}
	c.mu.Unlock()
	now := c.now()
	names := make([]string, 0, len(snap))
	for g := range snap {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		r := snap[g]
		ch <- prometheus.MustNewConstMetric(groupDescs.up, prometheus.GaugeValue, b2f(r.up), g)
		ch <- prometheus.MustNewConstMetric(groupDescs.readErrors, prometheus.CounterValue, float64(r.errors), g)
		if r.state != nil {
			collectObservation(ch, g, observe(newStatusJSON(r.state, statusOptions{LostAfter: c.lostAfter}, now)), now)
		}
	}
}

// collectObservation sends the metrics of one group's observation.
func collectObservation(ch chan<- prometheus.Metric, group string, o groupObservation, now time.Time) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{group}, labels...)...)
	}
	for _, s := range coordinator.GateStates {
		gauge(groupDescs.gate, b2f(o.Gate == s), string(s))
	}
	for _, s := range coordinator.Standings {
		gauge(groupDescs.nodes, float64(o.Nodes[s]), string(s))
	}
	gauge(groupDescs.behind, float64(o.Behind))
	gauge(groupDescs.stalled, b2f(o.Stalled))
	gauge(groupDescs.maxParallel, float64(o.MaxParallel))
	gauge(groupDescs.deadline, b2f(o.DeadlinePassed))
	if o.Committed {
		gauge(groupDescs.sinceConverged, max(now.Sub(o.LastConverged).Seconds(), 0))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
