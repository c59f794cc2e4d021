package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/hashspec"
)

func TestAfterRule(t *testing.T) {
	s := specWith(t, "pause", 1, 1)
	s.Update.After = []string{"ingress", "managers"}
	now := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)
	sha := strings.Repeat("1a2b3c4d", 8)
	done := func(g string) GroupProgress { return GroupProgress{Group: g, SHA: sha, Converged: 3, Counted: 3} }
	for _, tc := range []struct {
		name   string
		spec   *hashspec.Spec
		after  []GroupProgress
		closes bool
		reason string
	}{
		{"no after", specWith(t, "pause", 1, 1), nil, false, ""},
		{"not read", s, nil, true, "waiting for group ingress (not read)"},
		{"one not read", s, []GroupProgress{done("ingress")}, true, "waiting for group managers (not read)"},
		{"read failed", s, []GroupProgress{{Group: "ingress", Err: "Permission denied"}, done("managers")}, true,
			"waiting for group ingress (cannot read it: Permission denied)"},
		{"nothing committed", s, []GroupProgress{done("ingress"), {Group: "managers"}}, true,
			"waiting for group managers (nothing committed)"},
		{"converging", s, []GroupProgress{done("ingress"), {Group: "managers", SHA: sha, Converged: 2, Counted: 3}}, true,
			"waiting for group managers (2 of 3 converged on 1a2b3c4d1a2b)"},
		{"no nodes yet", s, []GroupProgress{done("ingress"), {Group: "managers", SHA: sha}}, true,
			"waiting for group managers (0 of 0 converged on 1a2b3c4d1a2b)"},
		{"a cycle", s, []GroupProgress{done("ingress"), {Group: "managers", SHA: sha, Counted: 3, After: []string{"web"}}}, true,
			"group managers waits for web too: a cycle"},
		{"all converged", s, []GroupProgress{done("ingress"), done("managers")}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := group(fixture{spec: tc.spec})(t)
			g.After = tc.after
			if v := checkPollRule(t, afterRule{}, GateInput{Group: g, Now: now}, tc.closes, tc.reason, OrderRecheck); v.BeforeStep {
				t.Errorf("verdict %+v: a hold on order is not taken back from a holder", v)
			}
		})
	}
	// A CANCEL stops every step: it wins over a hold.
	cg := group(fixture{spec: s, cancel: true})(t)
	if v := Evaluate(GateInput{Group: cg, Now: now}); v.State != GateCancelled {
		t.Errorf("cancelled and waiting for a group: %s, want %s", v.State, GateCancelled)
	}
	// A group whose nodes have all converged is not held when a group it
	// waits for moves on; one node behind, or unreadable, holds it.
	converging := []GroupProgress{done("ingress"), {Group: "managers", SHA: sha, Converged: 1, Counted: 3}}
	g := group(fixture{spec: s})(t)
	g.After = converging
	d := g.Desired.SHA
	for _, tc := range []struct {
		name    string
		nodes   []NodeState
		invalid []InvalidNode
		closes  bool
	}{
		{"no record yet", nil, nil, true},
		{"every node converged", []NodeState{{Node: "n1", SHA: d, State: StateConverged}, {Node: "n2", SHA: d, State: StateConverged}}, nil, false},
		{"one behind", []NodeState{{Node: "n1", SHA: d, State: StateConverged}, {Node: "n2", State: StateWaiting}}, nil, true},
		{"one unreadable", []NodeState{{Node: "n1", SHA: d, State: StateConverged}}, []InvalidNode{{Node: "n2"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.Nodes, g.Invalid = tc.nodes, tc.invalid
			if _, closed := (afterRule{}).Close(GateInput{Group: g, Now: now}); closed != tc.closes {
				t.Errorf("closed = %v, want %v", closed, tc.closes)
			}
		})
	}
}

func TestLastRule(t *testing.T) {
	s := specWith(t, "pause", 1, 1)
	s.Update.Last = &hashspec.Last{Check: "raft-leader"}
	now := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		spec   *hashspec.Spec
		last   *LastState
		closes bool
		reason string
	}{
		{"no last", specWith(t, "pause", 1, 1), &LastState{Local: "h1", Passing: []string{"h1"}, Behind: []string{"n2"}}, false, ""},
		{"status reads no node's gate", s, &LastState{Passing: []string{"h1"}, Behind: []string{"n2"}}, false, ""},
		{"not read", s, nil, false, ""},
		{"read failed", s, &LastState{Check: "raft-leader", Local: "h1", Err: "connection refused"}, true,
			`cannot read Consul check "raft-leader" for update.last: connection refused`},
		{"a follower goes", s, &LastState{Check: "raft-leader", Local: "h2", Passing: []string{"h1"}, Behind: []string{"n3"}}, false, ""},
		{"no leader", s, &LastState{Check: "raft-leader", Local: "h2", Behind: []string{"n3"}}, false, ""},
		{"the leader waits", s, &LastState{Check: "raft-leader", Local: "h1", Passing: []string{"h1"}, Behind: []string{"n3", "n2"}}, true,
			`waits to go last (check "raft-leader" passes on its Consul node h1): not converged yet: n2, n3`},
		{"the leader goes last", s, &LastState{Check: "raft-leader", Local: "h1", Passing: []string{"h1"}}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := group(fixture{spec: tc.spec})(t)
			g.Last = tc.last
			if v := checkPollRule(t, lastRule{}, GateInput{Group: g, Now: now}, tc.closes, tc.reason, OrderRecheck); v.BeforeStep {
				t.Errorf("verdict %+v: a hold on order is not taken back from a holder", v)
			}
		})
	}
}

// Status lists the nodes that wait to go last: the check passes on their
// Consul node, they are behind, and another node is behind too.
func TestLastWaiters(t *testing.T) {
	s := specWith(t, "pause", 1, 1)
	s.Update.Last = &hashspec.Last{Check: "raft-leader"}
	g := group(fixture{spec: s})(t)
	g.Nodes = []NodeState{{Node: "n1", ConsulNode: "h1", State: StateWaiting}, {Node: "n2", ConsulNode: "h2", State: StateWaiting}}
	g.Last = &LastState{Check: "raft-leader", Passing: []string{"h1"}, Behind: []string{"n2"}}
	if got := g.LastWaiters(); len(got) != 1 || got[0] != "n1" {
		t.Errorf("LastWaiters = %q, want [n1]", got)
	}
	g.Last.Behind = nil
	if got := g.LastWaiters(); got != nil {
		t.Errorf("LastWaiters with no node behind = %q, want none", got)
	}
}
