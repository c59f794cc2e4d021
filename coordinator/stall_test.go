package coordinator

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

var (
	stallNow = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	shaOld   = strings.Repeat("a", 64)
	shaNew   = strings.Repeat("b", 64)
)

// ago is a time d before stallNow.
func ago(d time.Duration) time.Time { return stallNow.Add(-d) }

func waitingNode(name string, since time.Time) NodeState {
	return NodeState{Node: name, SHA: shaOld, Desired: shaNew, State: StateWaiting, Since: since}
}

// stallCase builds a StallInput: an open gate at K, committed 10 minutes
// ago, with the given nodes, slot and down nodes.
func stallCase(k int, nodes []NodeState, h *lockstep.Holders, down ...string) StallInput {
	return StallInput{Gate: Verdict{Open: true, Reason: "open", SHA: shaNew, Limit: k},
		Desired: &Desired{SHA: shaNew, CommittedAt: ago(10 * time.Minute)},
		Nodes:   nodes, Holders: h, Unavailable: down, Now: stallNow}
}

// inLine is the slot with a contender key, locked by its session, for each
// of names, as lockstep writes them.
func inLine(names ...string) *lockstep.Holders {
	var pairs api.KVPairs
	for i, n := range names {
		id := "session-" + string(rune('a'+i))
		pairs = append(pairs, &api.KVPair{Key: lockstep.ContenderKey("slot/", n, id), Session: id,
			Value: []byte(`{"name":"` + n + `","state":"waiting"}`)})
	}
	// A key of an older version (named by session) that does not decode,
	// and a key whose session is gone, name no one.
	pairs = append(pairs, &api.KVPair{Key: "slot/c/junk", Session: "junk", Value: []byte("{")},
		&api.KVPair{Key: lockstep.ContenderKey("slot/", "n2", "gone"), Value: []byte(`{"name":"n2","state":"waiting"}`)})
	return lockstep.ParseHolders("slot/", pairs)
}

func TestDiagnose(t *testing.T) {
	converged := NodeState{Node: "n1", SHA: shaNew, Desired: shaNew, State: StateConverged, Since: ago(8 * time.Minute)}
	holding := &lockstep.Holders{Holding: map[string]lockstep.Entry{"s1": {Name: "n1", State: "holding", Since: ago(5 * time.Minute)}}}
	claim := func(until time.Time, lost bool) *lockstep.Holders {
		return &lockstep.Holders{Claims: map[string]lockstep.Claim{
			"n1": {Session: "dead", Since: ago(5 * time.Minute), Until: until, Lost: lost}}}
	}
	closed := stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, nil)
	closed.Gate = Verdict{Reason: "cancelled"}
	nothing := stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, nil)
	nothing.Desired, nothing.Gate = nil, Verdict{Reason: "nothing committed"}
	justCommitted := stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, nil)
	justCommitted.Desired.CommittedAt = ago(10 * time.Second)
	recentFailure := stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, nil)
	recentFailure.Failures = []Failure{{Node: "n1", SHA: shaNew, At: ago(20 * time.Second)}}

	why := func(in StallInput, down map[string]DownReason) StallInput { in.DownWhy = down; return in }
	tests := []struct {
		name    string
		in      StallInput
		want    []StallReason // nil: not stalled
		waiting []Waiter
	}{
		{"gate closed", closed, nil, nil},
		{"nothing committed", nothing, nil, nil},
		{"every node converged", stallCase(1, []NodeState{converged}, nil), nil, nil},
		{"a live holder", stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, holding), nil, nil},
		{"an orphaned claim still counts", stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))},
			claim(stallNow.Add(time.Minute), false)), nil, nil},
		// The canary n1 failed: n2 and n3 wait on the stage, out of the
		// line, and are not taken for agents that are down.
		{"an unpromoted canary stage holds the rest", func() StallInput {
			in := stallCase(1, []NodeState{
				{Node: "n1", Desired: shaNew, State: StateFailed, Since: ago(5 * time.Minute)},
				waitingNode("n2", ago(5*time.Minute)), waitingNode("n3", ago(5*time.Minute))}, nil)
			in.Canaries = []string{"n1"}
			return in
		}(), []StallReason{{Cause: CauseAwaitingCanaries, Nodes: []string{"n2", "n3"}}},
			[]Waiter{{Node: "n2", Since: ago(5 * time.Minute)}, {Node: "n3", Since: ago(5 * time.Minute)}}},
		{"down nodes fill the slots: the budget line says so", stallCase(1,
			[]NodeState{waitingNode("n2", ago(5*time.Minute))}, inLine("n2"), "n3"), nil, nil},
		{"waiting under a minute", stallCase(1, []NodeState{waitingNode("n2", ago(50*time.Second))}, nil), nil, nil},
		// Between one node's release and the next grant no one holds; the
		// released node's record is new.
		{"another node converged a moment ago", stallCase(1, []NodeState{
			{Node: "n1", SHA: shaNew, State: StateConverged, Since: ago(time.Second)},
			waitingNode("n2", ago(5*time.Minute))}, inLine("n2")), nil, nil},
		{"commit made seconds ago", justCommitted, nil, nil},
		// An agent that saw the release later than the reader may still
		// wait out the stagger with a slot free.
		{"quiet for less than a stagger past StallAfter", func() StallInput {
			in := stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, inLine("n2"))
			in.Stagger = 5 * time.Minute
			return in
		}(), nil, nil},
		{"failure recorded seconds ago", recentFailure, nil, nil},

		{"agent not in line", stallCase(1, []NodeState{converged, waitingNode("n2", ago(5*time.Minute))}, inLine()),
			[]StallReason{{CauseNotInLine, []string{"n2"}}}, []Waiter{{"n2", ago(5 * time.Minute)}}},
		{"no slot state read at all", stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, nil),
			[]StallReason{{CauseNotInLine, []string{"n2"}}}, []Waiter{{"n2", ago(5 * time.Minute)}}},
		{"in line with a slot free: a bug", stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, inLine("n2")),
			[]StallReason{{CauseNotGranted, []string{"n2"}}}, []Waiter{{"n2", ago(5 * time.Minute)}}},
		{"in line with a slot free past StallAfter and the stagger", func() StallInput {
			in := stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, inLine("n2"))
			in.Stagger = 3 * time.Minute
			return in
		}(), []StallReason{{CauseNotGranted, []string{"n2"}}}, []Waiter{{"n2", ago(5 * time.Minute)}}},
		// A reader's own sight of the release may be no older than the
		// reader (a status that just started): the stagger's hold does
		// not hide a stall the quiet time shows.
		{"held by the stagger as this reader sees it, quiet past StallAfter and the stagger", func() StallInput {
			in := stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))}, inLine())
			in.Stagger = 30 * time.Second
			in.Gate = Verdict{State: GateStagger, Reason: "stagger", SHA: shaNew, MaxParallel: 1}
			return in
		}(), []StallReason{{CauseNotInLine, []string{"n2"}}}, []Waiter{{"n2", ago(5 * time.Minute)}}},
		{"held by the stagger, quiet for less than StallAfter and the stagger", func() StallInput {
			in := stallCase(1, []NodeState{waitingNode("n2", ago(time.Minute))}, inLine())
			in.Stagger = 30 * time.Second
			in.Gate = Verdict{State: GateStagger, Reason: "stagger", SHA: shaNew, MaxParallel: 1}
			return in
		}(), nil, nil},
		{"down and not in line, a slot left", stallCase(2, []NodeState{waitingNode("n2", ago(5*time.Minute))}, inLine(), "n2"),
			[]StallReason{{CauseAgentDown, []string{"n2"}}}, []Waiter{{"n2", ago(5 * time.Minute)}}},
		{"its host down, not in line", why(stallCase(3, []NodeState{waitingNode("n2", ago(5*time.Minute)),
			waitingNode("n3", ago(5*time.Minute))}, inLine(), "n2", "n3"), map[string]DownReason{"n2": DownHost, "n3": DownAgentStopped}),
			[]StallReason{{CauseHostDown, []string{"n2"}}, {CauseAgentStopped, []string{"n3"}}},
			[]Waiter{{"n2", ago(5 * time.Minute)}, {"n3", ago(5 * time.Minute)}}},
		{"held by its own node's check, not in line", func() StallInput {
			in := stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute)), waitingNode("n3", ago(5*time.Minute))}, inLine())
			in.NodeChecks = map[string]string{"n2": `blocked by Consul check "disk" (critical) on node h2`}
			return in
		}(), []StallReason{{CauseNodeCheck, []string{"n2"}}, {CauseNotInLine, []string{"n3"}}},
			[]Waiter{{"n2", ago(5 * time.Minute)}, {"n3", ago(5 * time.Minute)}}},
		// n9, down outside the line in zone=a, fills it: n2, first in
		// line, waits for its zone, and n3 behind it.
		{"in line, its zone full of nodes down", func() StallInput {
			in := stallCase(3, []NodeState{waitingNode("n2", ago(5*time.Minute)), waitingNode("n3", ago(5*time.Minute))},
				inLine("n2", "n3"), "n9")
			in.Spread = &hashspec.Spread{Key: "zone", Max: 1}
			in.Domains = map[string]string{"n2": "zone=a", "n3": "zone=b", "n9": "zone=a"}
			return in
		}(), []StallReason{{CauseDomainFull, []string{"n2"}}, {CauseBehindDomainFull, []string{"n3"}}},
			[]Waiter{{"n2", ago(5 * time.Minute)}, {"n3", ago(5 * time.Minute)}}},
		{"a lost claim no longer counts", stallCase(1, []NodeState{waitingNode("n2", ago(5*time.Minute))},
			claim(ago(time.Minute*2), true)), []StallReason{{CauseNotInLine, []string{"n2"}}}, []Waiter{{"n2", ago(5 * time.Minute)}}},
		// A replacing record without a slot was left by a process that died.
		{"a replacing record without a slot", stallCase(1, []NodeState{
			{Node: "n1", SHA: shaOld, Desired: shaNew, State: StateReplacing, Since: ago(9 * time.Minute)},
			waitingNode("n2", ago(5*time.Minute))}, inLine("n2")),
			[]StallReason{{CauseNotGranted, []string{"n2"}}}, []Waiter{{"n2", ago(5 * time.Minute)}}},
		// An agent that never took up the commit left its old record.
		{"a record older than the commit waits from the commit", stallCase(1, []NodeState{
			{Node: "n3", SHA: shaOld, State: StateConverged, Since: ago(time.Hour)}}, inLine()),
			[]StallReason{{CauseNotInLine, []string{"n3"}}}, []Waiter{{"n3", ago(10 * time.Minute)}}},
		{"causes in order, oldest waiter first", stallCase(3, []NodeState{
			waitingNode("n2", ago(3*time.Minute)), waitingNode("n3", ago(4*time.Minute)),
			waitingNode("n4", ago(5*time.Minute)), waitingNode("n5", ago(6*time.Minute))}, inLine("n3"), "n5"),
			[]StallReason{{CauseAgentDown, []string{"n5"}}, {CauseNotInLine, []string{"n2", "n4"}}, {CauseNotGranted, []string{"n3"}}},
			[]Waiter{{"n5", ago(6 * time.Minute)}, {"n4", ago(5 * time.Minute)}, {"n3", ago(4 * time.Minute)}, {"n2", ago(3 * time.Minute)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Diagnose(tc.in)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("stalled: %+v", got)
				}
				return
			}
			if got == nil {
				t.Fatal("not stalled")
			}
			if !reflect.DeepEqual(got.Reasons, tc.want) {
				t.Errorf("reasons %+v, want %+v", got.Reasons, tc.want)
			}
			if !reflect.DeepEqual(got.Waiting, tc.waiting) {
				t.Errorf("waiting %+v, want %+v", got.Waiting, tc.waiting)
			}
			if stallNow.Sub(got.Quiet) <= StallAfter {
				t.Errorf("quiet since %v, under StallAfter", got.Quiet)
			}
		})
	}
}

func TestSlotBudget(t *testing.T) {
	until := stallNow.Add(4 * time.Minute)
	h := &lockstep.Holders{
		Holding: map[string]lockstep.Entry{"s1": {Name: "n1", State: "holding"}},
		Claims: map[string]lockstep.Claim{
			"n1": {Session: "s1", Until: until},                                 // the live holder's own claim
			"n2": {Session: "dead", Until: until},                               // orphaned, counts
			"n3": {Session: "dead", Until: ago(time.Second)},                    // past Until, unreported: counts
			"n4": {Session: "dead", Until: stallNow.Add(time.Hour), Lost: true}, // lost
		}}
	tests := []struct {
		name  string
		limit int
		h     *lockstep.Holders
		down  []string
		users []SlotUser
		full  bool
	}{
		{"nothing", 1, nil, nil, nil, false},
		{"holder, orphaned claim and down nodes, each once", 4, h, []string{"n2", "n5"},
			[]SlotUser{{"n1", SlotHolding, time.Time{}}, {"n2", SlotOrphaned, until}, {"n3", SlotOrphaned, ago(time.Second)}, {"n5", SlotUnavailable, time.Time{}}}, true},
		{"a slot left", 5, h, []string{"n5"},
			[]SlotUser{{"n1", SlotHolding, time.Time{}}, {"n2", SlotOrphaned, until}, {"n3", SlotOrphaned, ago(time.Second)}, {"n5", SlotUnavailable, time.Time{}}}, false},
		{"gate closed: K is 0, never full", 0, nil, []string{"n5"}, []SlotUser{{"n5", SlotUnavailable, time.Time{}}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := SlotBudget(tc.limit, tc.h, tc.down)
			if !reflect.DeepEqual(b.Users, tc.users) || b.Full() != tc.full {
				t.Fatalf("users %+v full %v, want %+v full %v", b.Users, b.Full(), tc.users, tc.full)
			}
		})
	}
}

// Diagnose treats a gate held by the stagger as open, which is only right
// while the stagger is the last rule: every rule before it is open then.
func TestStaggerRuleIsLast(t *testing.T) {
	if _, ok := Rules[len(Rules)-1].(staggerRule); !ok {
		t.Fatalf("the last rule is %T; Diagnose takes a gate closed by the stagger for open", Rules[len(Rules)-1])
	}
}
