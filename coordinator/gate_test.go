package coordinator

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
)

// ruleCase is one row of a rule's table: the group, whether the rule
// closes the gate on it, and what the verdict then says.
type ruleCase struct {
	name   string
	g      func(t *testing.T) *GroupState
	closes bool
	reason string // a part of the reason, when it closes
	node   NodeStatus
}

func runRule(t *testing.T, r Rule, cases []ruleCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c, closed := r.Close(GateInput{Group: tt.g(t), Now: time.Now()})
			if closed != tt.closes {
				t.Fatalf("closes %v, want %v (%+v)", closed, tt.closes, c)
			}
			if closed && (!strings.Contains(c.Reason, tt.reason) || c.Node != tt.node) {
				t.Fatalf("closed %+v, want a reason with %q and node state %q", c, tt.reason, tt.node)
			}
		})
	}
}

// checkPollRule checks a rule that polls Consul on in: it closes the gate
// or not as closes says, with reason in its words, and Evaluate holds and
// polls exactly when it closes, then with r's state, the node waiting and
// a recheck after recheck. It returns Evaluate's verdict.
func checkPollRule(t *testing.T, r Rule, in GateInput, closes bool, reason string, recheck time.Duration) Verdict {
	t.Helper()
	c, closed := r.Close(in)
	if closed != closes || !strings.Contains(c.Reason, reason) {
		t.Fatalf("got %+v closed=%v, want closed=%v with %q", c, closed, closes, reason)
	}
	v := Evaluate(in)
	if v.Open == closes || v.Hold != closes || v.Poll != closes {
		t.Errorf("verdict %+v: open must be %v, a hold and a poll when closed", v, !closes)
	}
	if closed && (v.State != r.State() || !v.Recheck.Equal(in.Now.Add(recheck)) || v.Node != StateWaiting) {
		t.Errorf("verdict %+v: want %s, node waiting, recheck in %s", v, r.State(), recheck)
	}
	return v
}

func group(f fixture) func(t *testing.T) *GroupState { return f.state }

func literal(g *GroupState) func(*testing.T) *GroupState {
	return func(*testing.T) *GroupState { return g }
}

func TestUnreadableRule(t *testing.T) {
	runRule(t, unreadableRule{}, []ruleCase{
		{"a desired record that does not decode", literal(&GroupState{DesiredPair: &api.KVPair{Key: "desired", Value: []byte("{")}}), true, "unreadable", ""},
		{"nothing committed", literal(&GroupState{}), false, "", ""},
		{"a readable record", group(fixture{spec: specWith(t, "pause", 1, 1)}), false, "", ""},
	})
}

func TestUncommittedRule(t *testing.T) {
	runRule(t, uncommittedRule{}, []ruleCase{
		{"nothing committed", literal(&GroupState{}), true, "nothing committed", ""},
		{"committed", group(fixture{spec: specWith(t, "pause", 1, 1)}), false, "", ""},
	})
}

func TestSpecMissingRule(t *testing.T) {
	runRule(t, specMissingRule{}, []ruleCase{
		{"desired with no spec", literal(&GroupState{Desired: &Desired{SHA: shaNew}}), true, "missing from history", ""},
		{"desired with its spec", group(fixture{spec: specWith(t, "pause", 1, 1)}), false, "", ""},
	})
}

func TestCancelRule(t *testing.T) {
	spec := specWith(t, "pause", 1, 1)
	runRule(t, cancelRule{}, []ruleCase{
		{"a CANCEL", group(fixture{spec: spec, cancel: true}), true, "operator", StateCancelled},
		{"a CANCEL and a pause", group(fixture{spec: spec, cancel: true, pause: true}), true, "operator", StateCancelled},
		{"no CANCEL", group(fixture{spec: spec, pause: true}), false, "", ""},
	})
}

func TestPauseRule(t *testing.T) {
	spec := specWith(t, "pause", 1, 1)
	runRule(t, pauseRule{}, []ruleCase{
		{"a pause record", group(fixture{spec: spec, pause: true}), true, "paused after", StatePaused},
		{"failures alone", group(fixture{spec: spec, failures: 1}), false, "", ""},
		{"neither", group(fixture{spec: spec}), false, "", ""},
	})
}

func TestFailureBudgetRule(t *testing.T) {
	runRule(t, failureBudgetRule{}, []ruleCase{
		{"max_failures reached under pause", group(fixture{spec: specWith(t, "pause", 1, 1), failures: 1}), true, "reached max_failures=1", StatePaused},
		{"past max_failures", group(fixture{spec: specWith(t, "pause", 1, 1), failures: 2}), true, "2 failure(s)", StatePaused},
		{"below max_failures", group(fixture{spec: specWith(t, "pause", 2, 1), failures: 1}), false, "", ""},
		{"rollback does not pause", group(fixture{spec: specWith(t, "rollback", 1, 1), failures: 1}), false, "", ""},
		{"continue does not pause", group(fixture{spec: specWith(t, "continue", 1, 1), failures: 3}), false, "", ""},
	})
}

// The first rule that closes gives the verdict; an open gate shows the
// node waiting and lends K; every rule's state is one of GateStates, and
// the closing keys are exactly those of the KeyRules.
func TestEvaluateTakesTheFirstRuleThatCloses(t *testing.T) {
	spec := specWith(t, "pause", 1, 3)
	for _, tt := range []struct {
		name  string
		f     fixture
		state GateState
		node  NodeStatus
		opens string
	}{
		{"open", fixture{spec: spec}, GateOpen, StateWaiting, ""},
		{"cancel before pause", fixture{spec: spec, cancel: true, pause: true, failures: 1}, GateCancelled, StateCancelled, NewCommitOpens},
		{"pause before the failure count", fixture{spec: spec, pause: true, failures: 1}, GatePaused, StatePaused, "rollagent resume"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.f.state(t).Gate()
			if v.State != tt.state || v.Node != tt.node || !strings.Contains(v.Opens, tt.opens) || v.Open != (tt.state == GateOpen) {
				t.Fatalf("verdict %+v, want %s, node %s, opens %q", v, tt.state, tt.node, tt.opens)
			}
			if v.Open && v.Limit != 3 || !v.Open && v.Limit != 0 {
				t.Fatalf("limit %d on an open=%v gate", v.Limit, v.Open)
			}
		})
	}
	for _, r := range Rules {
		if !slices.Contains(GateStates, r.State()) {
			t.Errorf("%T's state %q is not in GateStates", r, r.State())
		}
	}
	k, _ := NewKeys("", "web")
	if got, want := k.Closing(shaNew), []string{k.Pause(shaNew)}; !slices.Equal(got, want) {
		t.Errorf("closing keys %v, want %v", got, want)
	}
	if got, want := k.Brakes(shaNew), []string{k.Cancel(shaNew), k.LegacyCancel(shaNew), k.OperatorPause(), k.LegacyOperatorPause(shaNew)}; !slices.Equal(got, want) {
		t.Errorf("brakes %v, want %v", got, want)
	}
}

// The window rule holds new grants outside every window, says when the
// next opens, and tells the agent when to look again, open or closed.
func TestWindowRule(t *testing.T) {
	s := specWith(t, "pause", 1, 1)
	s.Update.Windows = []hashspec.Window{{Days: []string{"tue"}, Start: "02:00", Length: hashspec.Duration(time.Hour), TimeZone: "Europe/Berlin"}}
	g := group(fixture{spec: s})(t)
	tue := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC) // 02:00 CEST
	for _, tc := range []struct {
		name    string
		now     time.Time
		closes  bool
		reason  string
		recheck time.Time
		wait    string
	}{
		{"before", tue.Add(-3*time.Hour - 12*time.Minute), true, "the next opens Tue 02:00 Europe/Berlin", tue, "(in 3h12m)"},
		{"in it", tue.Add(30 * time.Minute), false, "", tue.Add(time.Hour), ""},
		{"after", tue.Add(time.Hour), true, "the next opens Tue 02:00 Europe/Berlin", tue.Add(7 * 24 * time.Hour), "(in 167h)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, closed := windowRule{}.Close(GateInput{Group: g, Now: tc.now})
			if closed != tc.closes || !strings.Contains(c.Reason, tc.reason) || !c.Recheck.Equal(tc.recheck) {
				t.Fatalf("got %+v closed=%v, want closed=%v with %q, recheck %s", c, closed, tc.closes, tc.reason, tc.recheck)
			}
			if closed && (!c.Hold || c.Node != "") {
				t.Errorf("outside a window is a hold with node state waiting, got %+v", c)
			}
			v := Evaluate(GateInput{Group: g, Now: tc.now})
			if v.Open == tc.closes || !v.Recheck.Equal(tc.recheck) || v.Hold != tc.closes || v.BeforeStep != tc.closes {
				t.Errorf("verdict %+v: open must be %v with recheck %s, judged again before a holder's first step when closed", v, !tc.closes, tc.recheck)
			}
			if w := v.Wait(tc.now); tc.closes && !strings.HasSuffix(w, tc.wait) {
				t.Errorf("Wait = %q, want it to end %q", w, tc.wait)
			}
		})
	}
	// A CANCEL stops every step: it wins over a hold.
	cg := group(fixture{spec: s, cancel: true})(t)
	if v := Evaluate(GateInput{Group: cg, Now: tue.Add(-time.Hour)}); v.State != GateCancelled || v.Hold || v.BeforeStep {
		t.Errorf("cancelled outside a window: %+v, want cancelled and no hold", v)
	}
}
