package integration

import (
	"testing"

	"github.com/rollagent/rollagent/coordinator"
)

// judgeGrant, without a cluster: a span covers a grant strictly between
// its indexes, of its group and SHA; a brake's grant is a violation; a
// check's is one unless the grant's record shows its health read came
// before the flip.
func TestJudgeGrant(t *testing.T) {
	grant := &grantSeen{group: "g", node: "n1", sha: "s1", index: 100}
	pause := span{what: "pause", group: "g", from: 90, to: 110}
	check := span{what: "gate check critical", check: true, from: 90, to: 110}
	read := func(i uint64) coordinator.NodeState { return coordinator.NodeState{HealthIndex: i} }
	for _, tc := range []struct {
		name  string
		s     span
		ours  bool
		rec   coordinator.NodeState
		seen  bool
		grant *grantSeen
		want  grantVerdict
	}{
		{"inside an operator's pause of its group", pause, true, read(0), false, grant, grantInside},
		{"a pause of another group", span{group: "h", from: 90, to: 110}, true, read(0), false, grant, grantOutside},
		{"at the resume's index or after", span{group: "g", from: 90, to: 100}, true, read(0), false, grant, grantOutside},
		{"at the pause's index or before", span{group: "g", from: 100, to: 110}, true, read(0), false, grant, grantOutside},
		{"a pause never lifted", span{group: "g", from: 90}, true, read(0), false, grant, grantInside},
		{"a cancel of its SHA", span{group: "g", sha: "s1", from: 90}, true, read(0), false, grant, grantInside},
		{"a cancel of another SHA", span{group: "g", sha: "s2", from: 90}, true, read(0), false, grant, grantOutside},
		{"check critical, read after the flip", check, true, read(95), true, grant, grantInside},
		{"check critical, read at the flip", check, true, read(90), true, grant, grantInside},
		{"check critical, read before the flip", check, true, read(89), true, grant, grantRaced},
		{"check critical, no read index", check, true, read(0), true, grant, grantInside},
		{"check critical, record not seen", check, true, read(0), false, grant, grantInside},
		{"check critical, a SHA from before the run", check, false, read(0), false, grant, grantOutside},
		{"check passing again", span{check: true, from: 90, to: 95}, true, read(0), false, grant, grantOutside},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := judgeGrant(tc.grant, tc.s, tc.ours, tc.rec, tc.seen); got != tc.want {
				t.Errorf("judgeGrant = %d (%s), want %d", got, why, tc.want)
			}
		})
	}
}

// lifts: a resume ends every pause; a commit of its SHA ends a failure
// pause, never an operator's (it holds the group).
func TestPauseLifts(t *testing.T) {
	ev := func(kind coordinator.EventKind, sha string) coordinator.LoggedEvent {
		return coordinator.LoggedEvent{Event: coordinator.Event{Kind: kind, SHA: sha}}
	}
	for _, tc := range []struct {
		name     string
		operator bool
		e        coordinator.LoggedEvent
		want     bool
	}{
		{"resume, operator's pause", true, ev(coordinator.EventResume, "s2"), true},
		{"resume, failure pause", false, ev(coordinator.EventResume, "s1"), true},
		{"commit of its SHA, operator's pause", true, ev(coordinator.EventCommit, "s1"), false},
		{"commit of its SHA, failure pause", false, ev(coordinator.EventCommit, "s1"), true},
		{"rollback to another SHA, failure pause", false, ev(coordinator.EventRollback, "s2"), false},
		{"a cancel", false, ev(coordinator.EventCancel, "s1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lifts("s1", tc.operator, tc.e); got != tc.want {
				t.Errorf("lifts = %v, want %v", got, tc.want)
			}
		})
	}
}
