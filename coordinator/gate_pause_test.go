package coordinator

import (
	"strings"
	"testing"
	"time"
)

// An operator's pause closes the gate whatever SHA is desired, even with
// nothing committed, and says since when and under which SHA it was taken.
func TestOperatorPauseRule(t *testing.T) {
	spec := specWith(t, "pause", 1, 1)
	desired, _ := spec.SHA()
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.FixedZone("CEST", 2*3600))
	const since = "(since 2026-05-06T05:08:09Z)"
	older := strings.Repeat("a", 64)
	withPause := func(f fixture, p *OperatorPause) func(t *testing.T) *GroupState {
		return func(t *testing.T) *GroupState {
			g := f.state(t)
			g.OperatorPause = p
			return g
		}
	}
	runRule(t, operatorPauseRule{}, []ruleCase{
		{"no pause", group(fixture{spec: spec}), false, "", ""},
		{"a failure pause is not the operator's", group(fixture{spec: spec, pause: true, failures: 1}), false, "", ""},
		{"the fixture's pause", group(fixture{spec: spec, opPause: true}), true, "paused by ops@host: look first", StatePaused},
		{"who and why, under the desired SHA", withPause(fixture{spec: spec}, &OperatorPause{SHA: desired, By: "ops", Reason: "look", At: at}),
			true, "paused by ops: look " + since, StatePaused},
		{"no reason, no time", withPause(fixture{spec: spec}, &OperatorPause{SHA: desired, By: "ops"}), true, "paused by ops", StatePaused},
		{"taken under an older SHA", withPause(fixture{spec: spec}, &OperatorPause{SHA: older, By: "ops", At: at}),
			true, "paused by ops (since 2026-05-06T05:08:09Z, when " + ShortSHA(older) + " was desired; commits since do not lift it)", StatePaused},
		{"no SHA recorded", withPause(fixture{spec: spec}, &OperatorPause{By: "ops", At: at}), true, "paused by ops " + since, StatePaused},
		{"nothing committed", literal(&GroupState{OperatorPause: &OperatorPause{SHA: older, At: at}}), true, "paused " + since, StatePaused},
	})
	t.Run("what opens it", func(t *testing.T) {
		c, closed := operatorPauseRule{}.Close(GateInput{Group: group(fixture{spec: spec, opPause: true})(t), Now: time.Now()})
		if !closed || c.Opens != "`rollagent resume` opens the gate" || c.Hold {
			t.Fatalf("closed %v %+v: want it closed, opened by resume, and no hold", closed, c)
		}
	})
	k, _ := NewKeys("", "web")
	if r := (operatorPauseRule{}); r.State() != GatePaused || !r.Brake() ||
		strings.Join(r.Keys(k, shaNew), " ") != k.OperatorPause()+" "+k.LegacyOperatorPause(shaNew) {
		t.Fatalf("state %s, brake %v, keys %v: want paused, a brake, the pause and its legacy key", r.State(), r.Brake(), r.Keys(k, shaNew))
	}
}
