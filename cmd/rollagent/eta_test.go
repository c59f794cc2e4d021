package main

import (
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

func TestEstimate(t *testing.T) {
	const sha = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	const old = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	node := func(name, sha string, state coordinator.NodeStatus, since int) coordinator.NodeState {
		return coordinator.NodeState{Node: name, SHA: sha, State: state, Since: at(since)}
	}
	open := coordinator.Verdict{Open: true, Limit: 1}
	tests := []struct {
		name    string
		nodes   []coordinator.NodeState
		verdict coordinator.Verdict
		now     int
		ok      bool
		left    time.Duration
		perNode time.Duration
	}{
		{name: "nothing converged yet: no pace", now: 30, verdict: open,
			nodes: []coordinator.NodeState{node("a", old, "replacing", 1), node("b", old, "waiting", 1)}},
		{name: "two of four done at 20s each, last just now", now: 40, verdict: open, ok: true,
			left: 40 * time.Second, perNode: 20 * time.Second,
			nodes: []coordinator.NodeState{node("a", sha, "converged", 20), node("b", sha, "converged", 40),
				node("c", old, "replacing", 40), node("d", old, "waiting", 1)}},
		{name: "time since the last completion counts", now: 50, verdict: open, ok: true,
			left: 30 * time.Second, perNode: 20 * time.Second,
			nodes: []coordinator.NodeState{node("a", sha, "converged", 20), node("b", sha, "converged", 40),
				node("c", old, "replacing", 40), node("d", old, "waiting", 1)}},
		{name: "overdue clamps at zero", now: 500, verdict: open, ok: true, perNode: 20 * time.Second,
			nodes: []coordinator.NodeState{node("a", sha, "converged", 20), node("b", old, "replacing", 20)}},
		{name: "nodes on the SHA before the commit give no pace", now: 30, verdict: open,
			nodes: []coordinator.NodeState{node("a", sha, "converged", -100), node("b", old, "waiting", 1)}},
		{name: "closed gate: nothing moves", now: 50, verdict: coordinator.Verdict{Reason: "cancelled"},
			nodes: []coordinator.NodeState{node("a", sha, "converged", 20), node("b", old, "waiting", 1)}},
		{name: "done", now: 50, verdict: open, ok: true,
			nodes: []coordinator.NodeState{node("a", sha, "converged", 20)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gs := &coordinator.GroupState{Group: "web", Nodes: tt.nodes,
				Desired: &coordinator.Desired{SHA: sha, CommittedAt: t0}}
			sum := coordinator.Summarize(coordinator.SummaryInput{Gate: tt.verdict, Desired: gs.Desired, Nodes: gs.Nodes, Now: at(tt.now)})
			e, ok := estimate(gs, sum, at(tt.now))
			if ok != tt.ok || e.left != tt.left || e.perNode != tt.perNode {
				t.Fatalf("estimate = %+v, %v; want left %s per node %s, %v", e, ok, tt.left, tt.perNode, tt.ok)
			}
		})
	}
}

func TestETAString(t *testing.T) {
	var none *etaJSON
	if none.String() != "" {
		t.Fatalf("nil eta printed %q", none.String())
	}
	e := &etaJSON{Seconds: 61.4, PerNodeSeconds: 20.2}
	if got, want := e.String(), "eta 1m1s (20s per node)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
