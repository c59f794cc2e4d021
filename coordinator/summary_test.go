package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/lockstep"
)

func TestSummarize(t *testing.T) {
	open := Verdict{Open: true, State: GateOpen, Reason: "open", SHA: shaNew, Limit: 2, MaxParallel: 2}
	paused := Verdict{State: GatePaused, Reason: "paused", SHA: shaNew, MaxParallel: 2}
	node := func(name, sha string, st NodeStatus, since time.Duration) NodeState {
		return NodeState{Node: name, SHA: sha, Desired: shaNew, State: st, Since: ago(since)}
	}
	conv := func(name string) NodeState { return node(name, shaNew, StateConverged, time.Minute) }
	stopped := func(n NodeState, at time.Duration) NodeState {
		t := ago(at)
		n.Stopped = &t
		return n
	}
	all := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	holding := &lockstep.Holders{Holding: map[string]lockstep.Entry{"s1": {Name: "n1", State: "holding"}}}
	claimed := &lockstep.Holders{Claims: map[string]lockstep.Claim{"n1": {Session: "dead", Until: ago(-time.Minute)}}}
	reported := &lockstep.Holders{Claims: map[string]lockstep.Claim{"n1": {Session: "dead", Until: ago(time.Minute), Lost: true}}}
	tests := []struct {
		name       string
		gate       Verdict
		nodes      []NodeState
		invalid    []InvalidNode
		failures   []Failure
		registered map[string]bool
		holders    *lockstep.Holders
		down       map[string]DownReason
		want       map[Standing]int // the non-zero counts
		counted    int
		done       bool
		stuck      int
	}{
		{name: "all converged: done", gate: open, nodes: []NodeState{conv("n1"), conv("n2")},
			registered: all("n1", "n2"), want: map[Standing]int{StandingConverged: 2}, counted: 2, done: true},
		{name: "a paused fleet with a failure counts it failed", gate: paused,
			nodes:    []NodeState{node("n1", shaOld, StatePaused, time.Minute), node("n2", shaOld, StatePaused, time.Minute), node("n3", shaOld, StatePaused, time.Minute)},
			failures: []Failure{{Node: "n1", SHA: shaNew, Error: "unhealthy"}},
			want:     map[Standing]int{StandingFailed: 1, StandingPaused: 2}, counted: 3, stuck: 3},
		{name: "a node stuck unknown: not done", gate: open, nodes: []NodeState{conv("n1"), conv("n2"), node("n3", shaNew, StateUnknown, time.Minute)},
			want: map[Standing]int{StandingConverged: 2, StandingUnknown: 1}, counted: 3, stuck: 1},
		{name: "verifying is its own count", gate: open, nodes: []NodeState{node("n1", shaNew, StateVerifying, 0), node("n2", shaOld, StateReplacing, 0)},
			want: map[Standing]int{StandingVerifying: 1, StandingReplacing: 1}, counted: 2},
		{name: "converged on an old SHA is behind", gate: open, nodes: []NodeState{conv("n1"), node("n2", shaOld, StateConverged, time.Hour)},
			want: map[Standing]int{StandingConverged: 1, StandingBehind: 1}, counted: 2},
		{name: "gone past the grace: lost, not counted, done", gate: open, registered: all("n1"),
			nodes: []NodeState{conv("n1"), node("n2", shaOld, StateConverged, 13*time.Minute)},
			want:  map[Standing]int{StandingConverged: 1, StandingLost: 1}, counted: 1, done: true},
		{name: "gone within the grace: still counts", gate: open, registered: all("n1"),
			nodes: []NodeState{conv("n1"), node("n2", shaOld, StateConverged, 2*time.Minute)},
			want:  map[Standing]int{StandingConverged: 1, StandingBehind: 1}, counted: 2},
		{name: "an idle node's agent just stopped: the grace runs from the stop", gate: open, registered: all("n1"),
			nodes: []NodeState{conv("n1"), stopped(node("n2", shaOld, StateConverged, time.Hour), 30*time.Second)},
			want:  map[Standing]int{StandingConverged: 1, StandingBehind: 1}, counted: 2},
		{name: "stopped past the grace: lost", gate: open, registered: all("n1"),
			nodes: []NodeState{conv("n1"), stopped(node("n2", shaOld, StateConverged, time.Hour), 11*time.Minute)},
			want:  map[Standing]int{StandingConverged: 1, StandingLost: 1}, counted: 1, done: true},
		{name: "catalog not read: no node is gone", gate: open,
			nodes: []NodeState{conv("n1"), node("n2", shaOld, StateConverged, 13*time.Minute)},
			want:  map[Standing]int{StandingConverged: 1, StandingBehind: 1}, counted: 2},
		{name: "a garbage record is a row that counts", gate: open, nodes: []NodeState{conv("n1")},
			invalid: []InvalidNode{{Node: "n0", Error: "nodes/n0: not a valid record"}},
			want:    map[Standing]int{StandingConverged: 1, StandingInvalid: 1}, counted: 2, stuck: 1},
		{name: "a live holder: not done", gate: open, nodes: []NodeState{conv("n1")}, holders: holding,
			want: map[Standing]int{StandingConverged: 1}, counted: 1},
		{name: "a claim that counts: not done", gate: open, nodes: []NodeState{conv("n1")}, holders: claimed,
			want: map[Standing]int{StandingConverged: 1}, counted: 1},
		{name: "a claim reported lost: done", gate: open, nodes: []NodeState{conv("n1")}, holders: reported,
			want: map[Standing]int{StandingConverged: 1}, counted: 1, done: true},
		{name: "gate closed: not done", gate: paused, nodes: []NodeState{conv("n1")},
			want: map[Standing]int{StandingConverged: 1}, counted: 1},
		{name: "no nodes: not done", gate: open, want: map[Standing]int{}},
		{name: "its record says down: not done", gate: open, nodes: []NodeState{conv("n1"), node("n2", shaNew, StateDown, time.Minute)},
			want: map[Standing]int{StandingConverged: 1, StandingDown: 1}, counted: 2, stuck: 1},
		{name: "converged, its workload down by Consul's check: down before its agent says so", gate: open,
			nodes: []NodeState{conv("n1"), conv("n2"), conv("n3")},
			down:  map[string]DownReason{"n2": DownWorkload, "n3": DownAgent},
			want:  map[Standing]int{StandingConverged: 2, StandingDown: 1}, counted: 3, stuck: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Summarize(SummaryInput{Gate: tt.gate, Desired: &Desired{SHA: shaNew, CommittedAt: ago(10 * time.Minute)},
				Nodes: tt.nodes, Invalid: tt.invalid, Failures: tt.failures, Registered: tt.registered,
				Holders: tt.holders, Down: tt.down, LostAfter: DefaultLostAfter, Now: stallNow})
			sum := 0
			for _, st := range Standings {
				n, ok := s.ByState[st]
				if !ok {
					t.Errorf("by state lacks %s", st)
				}
				if n != tt.want[st] {
					t.Errorf("%s: %d, want %d", st, n, tt.want[st])
				}
				sum += n
			}
			if sum != len(s.Rows) || len(s.Rows) != len(tt.nodes)+len(tt.invalid) {
				t.Errorf("counts add up to %d, rows %d, records %d", sum, len(s.Rows), len(tt.nodes)+len(tt.invalid))
			}
			if _, stuck := s.Left(); s.Counted != tt.counted || s.Done != tt.done || stuck != tt.stuck {
				t.Errorf("counted %d done %v stuck %d, want %d %v %d", s.Counted, s.Done, stuck, tt.counted, tt.done, tt.stuck)
			}
		})
	}
}

// A closed gate still names the policy's K, and says what closed it.
func TestGateStateAndK(t *testing.T) {
	spec := specWith(t, "pause", 1, 3)
	tests := []struct {
		name  string
		f     fixture
		state GateState
		limit int
	}{
		{"open", fixture{spec: spec}, GateOpen, 3},
		{"cancelled", fixture{spec: spec, cancel: true}, GateCancelled, 0},
		{"paused by a record", fixture{spec: spec, pause: true}, GatePaused, 0},
		{"paused by failures", fixture{spec: spec, failures: 1}, GatePaused, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.f.state(t).Gate()
			if v.State != tt.state || v.MaxParallel != 3 || v.Limit != tt.limit {
				t.Fatalf("gate %+v, want state %s, max_parallel 3, limit %d", v, tt.state, tt.limit)
			}
		})
	}
	for _, tt := range []struct {
		g     *GroupState
		state GateState
	}{{&GroupState{}, GateUncommitted}, {&GroupState{DesiredPair: &api.KVPair{Key: "desired", Value: []byte("{")}}, GateUnreadable},
		{&GroupState{Desired: &Desired{SHA: shaNew}}, GateSpecMissing}} {
		if v := tt.g.Gate(); v.State != tt.state || v.Open {
			t.Errorf("gate %+v, want closed %s", v, tt.state)
		}
	}
}

// A lost node does not wait: a group whose only node behind left is no
// stall.
func TestDiagnoseSkipsLostNodes(t *testing.T) {
	in := stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, nil)
	if Diagnose(in) == nil {
		t.Fatal("a waiting node that is not lost must stall")
	}
	in.Lost = map[string]bool{"n2": true}
	if st := Diagnose(in); st != nil {
		t.Fatalf("a lost node stalls the group: %+v", st)
	}
}

func TestNodeAlive(t *testing.T) {
	live := &lockstep.Holders{Holding: map[string]lockstep.Entry{"s1": {Name: "n1"}},
		Claims: map[string]lockstep.Claim{
			"n1": {Session: "s1", Until: ago(time.Hour)},
			"n2": {Session: "dead", Until: ago(-time.Minute)},
			"n3": {Session: "dead", Until: ago(time.Minute)},
			"n4": {Session: "dead", Until: ago(-time.Minute), Lost: true}}}
	tests := []struct {
		name       string
		node       string
		registered map[string]bool
		h          *lockstep.Holders
		want       string
	}{
		{"registered", "n9", map[string]bool{"n9": true}, nil, "its instance of service rollagent-web is registered in Consul's catalog"},
		{"catalog unread", "n9", nil, nil, "Consul's catalog could not be read, so it may be registered"},
		{"gone", "n9", map[string]bool{}, live, ""},
		{"holding", "n1", map[string]bool{}, live, "it holds a slot (its session is live)"},
		{"in line", "n7", map[string]bool{}, inLine("n7"), "it is in line for a slot (its session is live)"},
		{"a claim that counts", "n2", map[string]bool{}, live, "its claim on a slot counts against max_parallel until it is released, or reported lost by a node in line that saw it orphaned for its lease (not before about " + ago(-time.Minute).Format(time.RFC3339) + ")"},
		// No clock ends a claim: it counts until a waiter reports it.
		{"a claim past its Until", "n3", map[string]bool{}, live, "its claim on a slot counts against max_parallel until it is released, or reported lost by a node in line that saw it orphaned for its lease (not before about " + ago(time.Minute).Format(time.RFC3339) + ")"},
		{"a claim reported lost", "n4", map[string]bool{}, live, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(NodeAlive("web", tt.node, tt.registered, tt.h), "; "); got != tt.want {
				t.Fatalf("NodeAlive = %q, want %q", got, tt.want)
			}
		})
	}
}
