package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

const (
	shaA = "a"
	shaB = "b"
	// shaC was desired once, and is no longer.
	shaC = "c"
)

func open(l Look) Look {
	l.Desired, l.Open, l.Reason = shaB, true, "open"
	return l
}

func cancelled(l Look) Look {
	l.Desired, l.Open, l.ClosedState, l.Reason = shaB, false, coordinator.StateCancelled, "cancelled by ops"
	return l
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name  string
		look  Look
		plan  Plan
		state coordinator.NodeStatus
	}{
		{"unreadable desired touches nothing", Look{Unreadable: true, Claimed: true, Leftover: true}, PlanIdle, coordinator.StateWaiting},
		{"nothing committed", Look{SHA: shaA}, PlanIdle, ""},
		{"a claim of its own is reclaimed first, gate open", open(Look{SHA: shaA, Claimed: true}), PlanReclaim, ""},
		{"a claim of its own is reclaimed first, under a CANCEL", cancelled(Look{SHA: shaB, Leftover: true, Claimed: true}), PlanReclaim, ""},
		{"converged", open(Look{SHA: shaB, Healthy: true}), PlanIdle, coordinator.StateConverged},
		{"behind, gate open", open(Look{SHA: shaA, Healthy: true}), PlanContend, ""},
		{"behind and down, gate open: claims its slot and goes first", open(Look{SHA: shaA, Down: true}), PlanClaimDown, ""},
		{"behind and failing short of down (one failed probe, a container starting): waits its turn", open(Look{SHA: shaA}), PlanContend, ""},
		{"converged, then down: counts against K and says so", open(Look{SHA: shaB, Down: true}), PlanIdle, coordinator.StateDown},
		{"converged, failing short of down: still converged", open(Look{SHA: shaB}), PlanIdle, coordinator.StateConverged},
		{"converged and down under a CANCEL: says down", cancelled(Look{SHA: shaB, Down: true}), PlanIdle, coordinator.StateDown},
		{"nothing deployed and down is nothing: a first deploy waits its turn", open(Look{Down: true}), PlanContend, ""},
		{"behind and down, refused: it moves no more", open(Look{SHA: shaA, Down: true, Refused: "failed before"}), PlanIdle, coordinator.StateFailed},
		{"nothing managed yet: a first deploy waits its turn", open(Look{}), PlanContend, ""},
		{"behind and down, cancelled", cancelled(Look{SHA: shaA, Down: true}), PlanIdle, coordinator.StateCancelled},
		{"interrupted and down, gate open: claims its slot, not the line it would block", open(Look{SHA: shaB, Unverified: true, Down: true}), PlanClaimDown, ""},
		{"old set aside, nothing started, down: claims its slot", open(Look{Leftover: true, Down: true}), PlanClaimDown, ""},
		{"interrupted and down, cancelled: touches nothing", cancelled(Look{SHA: shaB, Leftover: true, Down: true}), PlanIdle, coordinator.StateCancelled},
		{"interrupted and down, refused: moves no more", open(Look{SHA: shaB, Leftover: true, Down: true, Refused: "failed before"}), PlanIdle, coordinator.StateFailed},
		{"behind, cancelled", cancelled(Look{SHA: shaA}), PlanIdle, coordinator.StateCancelled},
		{"behind, refused", open(Look{SHA: shaA, Refused: "failed before"}), PlanIdle, coordinator.StateFailed},
		{"leftover, gate open: verified under a slot", open(Look{SHA: shaB, Leftover: true}), PlanContend, ""},
		{"leftover under a CANCEL: nothing moves", cancelled(Look{SHA: shaB, Leftover: true}), PlanIdle, coordinator.StateCancelled},
		{"leftover of a superseded SHA, gate open", open(Look{SHA: shaA, Leftover: true}), PlanContend, ""},
		{"unverified desired, gate open", open(Look{SHA: shaB, Unverified: true}), PlanContend, ""},
		{"unverified under a CANCEL", cancelled(Look{SHA: shaB, Unverified: true}), PlanIdle, coordinator.StateCancelled},
		{"unverified but its own failure is recorded", open(Look{SHA: shaB, Unverified: true, Refused: "unhealthy"}), PlanIdle, coordinator.StateFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.look)
			if d.Plan != tc.plan || d.State != tc.state {
				t.Fatalf("decide = %+v, want plan %d state %q", d, tc.plan, tc.state)
			}
		})
	}
}

func TestUnderSlot(t *testing.T) {
	cases := []struct {
		name string
		look Look
		want Step
	}{
		{"cancelled, healthy: a workload of any SHA stays, the old one set aside", cancelled(Look{SHA: shaA, Leftover: true, Healthy: true}), StepRelease},
		{"cancelled, healthy desired with the old set aside: nothing dropped", cancelled(Look{SHA: shaB, Leftover: true, Healthy: true, Reclaimed: true}), StepRelease},
		{"cancelled, new workload down: no undo, keep the slot", cancelled(Look{SHA: shaB, Leftover: true}), StepKeep},
		{"cancelled, only the set-aside workload left: no undo, keep the slot", cancelled(Look{Leftover: true}), StepKeep},
		{"cancelled, down with nothing to bring back: keep the slot", cancelled(Look{SHA: shaB, Unverified: true}), StepKeep},
		{"cancelled, behind and down: keep the slot", cancelled(Look{SHA: shaA, Reclaimed: true}), StepKeep},
		{"cancelled, nothing managed", cancelled(Look{}), StepRelease},
		{"cancelled, lapsed claim, down with the old set aside: no undo", cancelled(Look{SHA: shaB, Leftover: true, Lapsed: true}), StepKeep},
		{"cancelled, lapsed claim, healthy: released", cancelled(Look{SHA: shaA, Leftover: true, Healthy: true, Lapsed: true}), StepRelease},
		{"open, leftover of the desired SHA", open(Look{SHA: shaB, Leftover: true, Healthy: true}), StepVerify},
		{"open, leftover of a superseded SHA", open(Look{SHA: shaA, Leftover: true, Healthy: true}), StepVerify},
		{"open, unverified desired", open(Look{SHA: shaB, Unverified: true, Healthy: true}), StepVerify},
		{"open, converged and healthy: a lost release or reply", open(Look{SHA: shaB, Healthy: true}), StepRelease},
		{"open, desired but down", open(Look{SHA: shaB}), StepVerify},
		{"open, behind", open(Look{SHA: shaA, Healthy: true}), StepReplace},
		{"open, behind and down: goes now", open(Look{SHA: shaA}), StepReplace},
		{"reclaimed, behind and healthy: a new step takes a grant", open(Look{SHA: shaA, Healthy: true, Reclaimed: true}), StepRelease},
		{"reclaimed, behind and down: goes now", open(Look{SHA: shaA, Reclaimed: true, Down: true}), StepReplace},
		{"claimed down, failing short of down when read again: goes now, under its own claim", open(Look{SHA: shaA, Reclaimed: true}), StepReplace},
		{"claimed down, healthy again when read again: releases, back in line", open(Look{SHA: shaA, Reclaimed: true, Healthy: true}), StepRelease},
		{"reclaimed, leftover of a superseded SHA: verified first", open(Look{SHA: shaA, Leftover: true, Healthy: true, Reclaimed: true}), StepVerify},
		{"open, refused and healthy", open(Look{SHA: shaA, Healthy: true, Refused: "x"}), StepRelease},
		{"open, refused and down", open(Look{SHA: shaA, Refused: "x"}), StepKeep},
		{"lapsed claim, healthy superseded workload: no further move", open(Look{SHA: shaA, Leftover: true, Healthy: true, Lapsed: true}), StepRelease},
		{"lapsed claim, down with the old set aside: undone", open(Look{SHA: shaA, Leftover: true, Lapsed: true}), StepUndo},
		{"lapsed claim, behind and down: keeps counting", open(Look{SHA: shaA, Lapsed: true}), StepKeep},
		{"an undo this process began goes on under a pause", cancelled(Look{SHA: shaA, Leftover: true, Undoing: shaB}), StepUndo},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := underSlot(tc.look); got != tc.want {
				t.Fatalf("underSlot = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestDecideReasons checks what an idle node's record says, to the word.
func TestDecideReasons(t *testing.T) {
	lapsed := "; an interrupted step is left as it is until the gate opens"
	cases := []struct {
		name   string
		look   Look
		state  coordinator.NodeStatus
		reason string
		again  time.Duration
	}{
		{"unreadable", Look{Unreadable: true}, coordinator.StateWaiting, "the desired record is unreadable; touching nothing until it is fixed", 0},
		{"nothing committed", Look{SHA: shaA}, "", "", 0},
		{"interrupted under a CANCEL", cancelled(Look{SHA: shaB, Leftover: true}), coordinator.StateCancelled, "cancelled by ops" + lapsed, 0},
		{"unverified under a CANCEL", cancelled(Look{SHA: shaB, Unverified: true}), coordinator.StateCancelled, "cancelled by ops" + lapsed, 0},
		{"interrupted and refused", open(Look{SHA: shaB, Leftover: true, Refused: "failed before"}), coordinator.StateFailed, "failed before", 0},
		{"converged and down: looks again to say converged", open(Look{SHA: shaB, Down: true, Why: "probe refused"}), coordinator.StateDown, "the workload is down: probe refused", retryPause},
		{"converged", open(Look{SHA: shaB}), coordinator.StateConverged, "", 0},
		{"behind under a CANCEL", cancelled(Look{SHA: shaA}), coordinator.StateCancelled, "cancelled by ops", 0},
		{"behind and refused", open(Look{SHA: shaA, Refused: "not allowed"}), coordinator.StateFailed, "not allowed", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.look)
			if d.Plan != PlanIdle || d.State != tc.state || d.Reason != tc.reason || d.Again != tc.again {
				t.Fatalf("decide = %+v, want idle, state %q, reason %q, again %v", d, tc.state, tc.reason, tc.again)
			}
		})
	}
}

// TestDecideInLine checks the first step a node that takes its slot in
// line expects, and that it prepares Desired only for a replacement.
func TestDecideInLine(t *testing.T) {
	cases := []struct {
		name    string
		look    Look
		plan    Plan
		step    Step
		prepare bool
	}{
		{"behind: replaced, prepared first", open(Look{SHA: shaA, Healthy: true}), PlanContend, StepReplace, true},
		{"nothing managed: replaced, prepared first", open(Look{}), PlanContend, StepReplace, true},
		{"behind and down: claims down, prepared first", open(Look{SHA: shaA, Down: true}), PlanClaimDown, StepReplace, true},
		{"interrupted: verified, nothing prepared", open(Look{SHA: shaB, Leftover: true}), PlanContend, StepVerify, false},
		{"interrupted and down: claims down, verified", open(Look{SHA: shaB, Unverified: true, Down: true}), PlanClaimDown, StepVerify, false},
		{"a claim of its own: its step is known once reclaimed", open(Look{SHA: shaA, Claimed: true}), PlanReclaim, StepRelease, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.look)
			if d.Plan != tc.plan || d.Step != tc.step || d.Prepare != tc.prepare {
				t.Fatalf("decide = %+v, want plan %d step %d prepare %v", d, tc.plan, tc.step, tc.prepare)
			}
		})
	}
}

// everyLook calls f with every combination of what a Look holds, each field
// taking the values that make a difference to decide and underSlot.
func everyLook(f func(Look)) {
	bits := func(n, i int) bool { return n&(1<<i) != 0 }
	for _, sha := range []string{"", shaA, shaB} {
		for _, desired := range []string{"", shaB} {
			for n := 0; n < 1<<11; n++ {
				l := Look{SHA: sha, Desired: desired, Unreadable: bits(n, 0), Open: bits(n, 1), Leftover: bits(n, 2),
					Healthy: bits(n, 3), Down: bits(n, 4), Unverified: bits(n, 5), Claimed: bits(n, 6), Lapsed: bits(n, 7),
					Reclaimed: bits(n, 8), Why: "probe refused", Reason: "open"}
				if !l.Open {
					l.ClosedState, l.Reason = coordinator.StateCancelled, "cancelled by ops"
				}
				if bits(n, 9) {
					l.Refused = "failed before"
				}
				if bits(n, 10) {
					l.Undoing = shaA
				}
				f(l)
			}
		}
	}
}

// TestDecideEveryLook holds decide to its rules over every Look.
func TestDecideEveryLook(t *testing.T) {
	everyLook(func(l Look) {
		d := decide(l)
		inLine := d.Plan == PlanContend || d.Plan == PlanClaimDown
		switch {
		case l.Unreadable && (d.Plan != PlanIdle || d.State != coordinator.StateWaiting):
			t.Errorf("%+v: unreadable desired, decide = %+v, want waiting and touching nothing", l, d)
		case !l.Unreadable && l.Claimed && d.Plan != PlanReclaim:
			t.Errorf("%+v: a claim of its own, decide = %+v, want it reclaimed", l, d)
		case !l.Open && inLine:
			t.Errorf("%+v: gate closed, decide = %+v, want no slot taken in line", l, d)
		case l.Refused != "" && inLine:
			t.Errorf("%+v: refused, decide = %+v, want no slot taken in line", l, d)
		case inLine && (d.Step != underSlot(l) || d.Prepare != (d.Step == StepReplace)):
			t.Errorf("%+v: decide = %+v, want step %d, prepared only to replace", l, d, underSlot(l))
		case !inLine && (d.Prepare || d.Step != StepRelease):
			t.Errorf("%+v: decide = %+v, want no step and nothing prepared", l, d)
		case (d.Again != 0) != (d.State == coordinator.StateDown):
			t.Errorf("%+v: decide = %+v, want to look again soon only while down", l, d)
		case d.Plan == PlanIdle && d.State == "" && (l.Desired != "" || d.Reason != ""):
			t.Errorf("%+v: decide = %+v, want a state while something is committed", l, d)
		case d.Plan == PlanIdle && d.State != coordinator.StateConverged && d.State != "" && d.Reason == "":
			t.Errorf("%+v: decide = %+v, want a reason", l, d)
		}
	})
}

func TestConclude(t *testing.T) {
	downKeepsUntil := downKeeps + " until " + coordinator.NewCommitOpens + " to recover under"
	cases := []struct {
		name string
		look Look
		ev   event
		want outcome
	}{
		{"nothing to change, converged", open(Look{SHA: shaB, Healthy: true, Claimed: true}), event{end: endNothing},
			outcome{Result: resultReleased, State: coordinator.StateConverged}},
		{"nothing to change, healthy and behind after a reclaim: back in line", open(Look{SHA: shaA, Healthy: true, Claimed: true, Reclaimed: true}), event{end: endNothing},
			outcome{Result: resultYielded, State: coordinator.StateWaiting}},
		{"nothing to change, cancelled", cancelled(Look{SHA: shaA, Healthy: true, Claimed: true}), event{end: endNothing},
			outcome{Result: resultReleased, State: coordinator.StateCancelled, Reason: "cancelled by ops"}},
		{"nothing to change, cancelled with a step left", cancelled(Look{SHA: shaA, Leftover: true, Healthy: true, Claimed: true}), event{end: endNothing},
			outcome{Result: resultReleased, State: coordinator.StateCancelled, Reason: "cancelled by ops; an interrupted step is left as it is until the gate opens"}},
		{"nothing to change, refused", open(Look{SHA: shaA, Healthy: true, Claimed: true, Refused: "failed before"}), event{end: endNothing},
			outcome{Result: resultReleased, State: coordinator.StateFailed, Reason: "failed before"}},
		{"nothing to change, nothing committed", Look{SHA: shaA, Claimed: true}, event{end: endNothing},
			outcome{Result: resultYielded, State: coordinator.StateWaiting}},
		{"down under a CANCEL", cancelled(Look{SHA: shaB, Leftover: true}), event{end: endDown},
			outcome{Result: resultKept, Keep: true, State: coordinator.StateCancelled, Reason: "cancelled by ops" + downKeepsUntil}},
		{"down under a pause a resume opens", func() Look { l := cancelled(Look{SHA: shaB}); l.Opens = "a resume"; return l }(), event{end: endDown},
			outcome{Result: resultKept, Keep: true, State: coordinator.StateCancelled, Reason: "cancelled by ops" + downKeeps + " until a resume to recover under"}},
		{"down and refused", open(Look{SHA: shaA, Refused: "failed before"}), event{end: endDown},
			outcome{Result: resultKept, Keep: true, State: coordinator.StateFailed, Reason: "failed before" + downKeeps}},
		{"down, its claim lapsed", open(Look{SHA: shaA, Lapsed: true}), event{end: endDown},
			outcome{Result: resultKept, Keep: true, State: coordinator.StateWaiting, Reason: "its claim had lapsed before it was back" + downKeeps}},
		{"verified, refused: moves no further", open(Look{SHA: shaA, Healthy: true, Refused: "failed before"}), event{end: endVerified},
			outcome{Result: resultReleased, State: coordinator.StateFailed, Reason: "failed before"}},
		{"verified after a reclaim: back in line", open(Look{SHA: shaA, Healthy: true, Reclaimed: true}), event{end: endVerified},
			outcome{Result: resultYielded, State: coordinator.StateWaiting}},
		{"verified after a reclaim, read down before: back in line", open(Look{SHA: shaA, Healthy: true, Reclaimed: true, Down: true}), event{end: endVerified},
			outcome{Result: resultYielded, State: coordinator.StateWaiting}},
		{"verified, won in line: goes on to Desired", open(Look{SHA: shaA, Healthy: true}), event{end: endVerified},
			outcome{Replace: true}},
		{"converged", open(Look{SHA: shaB}), event{end: endConverged},
			outcome{Result: resultSuccess, State: coordinator.StateConverged}},
		{"prepare failed", open(Look{SHA: shaA}), event{end: endPrepareFailed, err: "pull: denied"},
			outcome{Result: resultAborted, State: coordinator.StateFailed, Reason: "prepare: pull: denied"}},
		{"prepare cut off by a stop: nothing touched, the slot goes back", open(Look{SHA: shaA}), event{end: endPrepareStopped, err: "pull: context canceled"},
			outcome{Result: resultAborted, State: coordinator.StateWaiting, Reason: prepareStopped + "pull: context canceled"}},
		{"drain failed", open(Look{SHA: shaA, Healthy: true}), event{end: endDrainFailed, err: "drain: denied"},
			outcome{Result: resultAborted, State: coordinator.StateFailed, Reason: "drain: denied" + drainDeferred}},
		{"held before the first step: nothing touched, the slot goes back", open(Look{SHA: shaA, Healthy: true}), event{end: endHeld, err: "outside the maintenance window"},
			outcome{Result: resultAborted, State: coordinator.StateWaiting, Reason: "outside the maintenance window" + heldUntouched}},
		{"held before the first step, down meanwhile: keeps its slot", open(Look{SHA: shaA}), event{end: endHeld, err: "outside the maintenance window"},
			outcome{Result: resultAborted, Keep: true, State: coordinator.StateWaiting, Reason: "outside the maintenance window"}},
		{"stopped", open(Look{SHA: shaA}), event{end: endStopped, err: "fence: cancelled"},
			outcome{Result: resultAborted, Keep: true, State: coordinator.StateWaiting, Reason: "fence: cancelled"}},
		{"restore failed", open(Look{SHA: shaB, Leftover: true}), event{end: endRestoreFailed, err: "disk full"},
			outcome{Result: resultAborted, Keep: true, State: coordinator.StateFailed, Reason: "restoring the old workload: disk full"}},
		{"runtime unread at a look", open(Look{}), event{end: endUnread, err: "dockerd away"},
			outcome{Result: resultAborted, State: coordinator.StateUnknown, Reason: "dockerd away"}},
		{"runtime unread after the undo", open(Look{SHA: shaA}), event{end: endUndoUnread, err: "dockerd away"},
			outcome{Result: resultKept, Keep: true, State: coordinator.StateUnknown, Reason: "after the undo: dockerd away"}},
		{"undone, healthy, nothing counted: in line again", open(Look{SHA: shaA, Healthy: true}), event{end: endUndone},
			outcome{Result: resultAborted, State: coordinator.StateWaiting}},
		{"undone, healthy, a failure counted: waits for a commit", open(Look{SHA: shaA, Healthy: true}), event{end: endUndone, cause: "unhealthy", failed: shaB},
			outcome{Result: resultFailed, State: coordinator.StateFailed, Reason: "unhealthy"}},
		{"undone, down, a failure counted: keeps its slot", open(Look{SHA: shaA}), event{end: endUndone, cause: "unhealthy", failed: shaB},
			outcome{Result: resultKept, Keep: true, State: coordinator.StateFailed, Reason: "unhealthy" + downKeeps}},
		{"undone, only the set-aside workload, down", open(Look{Leftover: true}), event{end: endUndone},
			outcome{Result: resultKept, Keep: true, State: coordinator.StateWaiting, Reason: downKeeps}},
		{"undone, nothing runs: nothing down", open(Look{}), event{end: endUndone},
			outcome{Result: resultAborted, State: coordinator.StateWaiting}},
		{"undone under a CANCEL, healthy", cancelled(Look{SHA: shaA, Healthy: true}), event{end: endUndone},
			outcome{Result: resultAborted, State: coordinator.StateCancelled, Reason: "cancelled by ops"}},
		{"undone under a CANCEL, down", cancelled(Look{SHA: shaA}), event{end: endUndone},
			outcome{Result: resultKept, Keep: true, State: coordinator.StateCancelled, Reason: "cancelled by ops" + downKeeps}},
		{"undone onto Desired, healthy", open(Look{SHA: shaB, Healthy: true}), event{end: endUndone},
			outcome{Result: resultAborted, State: coordinator.StateConverged}},
		{"undone, healthy, a failure of a SHA no longer desired: goes on to Desired", open(Look{SHA: shaA, Healthy: true}), event{end: endUndone, cause: "unhealthy", failed: shaC},
			outcome{Result: resultFailed, State: coordinator.StateFailed, Reason: "unhealthy", Behind: true}},
		{"undone, down, a failure of a SHA no longer desired: keeps its slot", open(Look{SHA: shaA}), event{end: endUndone, cause: "unhealthy", failed: shaC},
			outcome{Result: resultKept, Keep: true, State: coordinator.StateFailed, Reason: "unhealthy" + downKeeps}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := conclude(tc.look, tc.ev); got != tc.want {
				t.Fatalf("conclude = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestConcludeEveryLook holds conclude to its rules over every Look and
// every end: a state for every record, a reason for every state but
// converged and waiting, and a slot that is kept only by a result that
// says so.
func TestConcludeEveryLook(t *testing.T) {
	everyLook(func(l Look) {
		for e := endNothing; e < numEnds; e++ {
			o := conclude(l, event{end: e, err: "error", cause: "cause"})
			switch {
			case o.Replace && (e != endVerified || o != outcome{Replace: true}):
				t.Errorf("%+v, end %d: conclude = %+v, want to go on only after a verification", l, e, o)
			case o.Replace:
			case o.State == "":
				t.Errorf("%+v, end %d: conclude = %+v, want a state", l, e, o)
			case o.Reason == "" && o.State != coordinator.StateConverged && o.State != coordinator.StateWaiting:
				t.Errorf("%+v, end %d: conclude = %+v, want a reason", l, e, o)
			case o.Keep && o.Result != resultKept && o.Result != resultAborted:
				t.Errorf("%+v, end %d: conclude = %+v, want a kept slot to say so", l, e, o)
			case o.Result == resultKept && !o.Keep:
				t.Errorf("%+v, end %d: conclude = %+v, want the slot kept", l, e, o)
			case e == endHeld && (!l.Healthy || l.Leftover) && !o.Keep:
				t.Errorf("%+v, end %d: conclude = %+v, want the slot kept: the node is down or mid-step", l, e, o)
			}
		}
	})
}

func TestAgain(t *testing.T) {
	cases := []struct {
		r      result
		open   bool
		behind bool
		wait   time.Duration
		idle   bool
	}{
		{resultAborted, true, false, 2 * time.Second, false},
		{resultAborted, false, false, 2 * time.Second, false},
		{resultYielded, true, false, 2 * time.Second, false},
		{resultYielded, false, false, 2 * time.Second, false},
		{resultKept, true, false, retryPause, false},
		{resultKept, false, false, 0, false},
		{resultSuccess, true, false, 0, true},
		{resultFailed, true, false, 0, true},
		{resultFailed, false, false, 0, true},
		// A failure of a SHA no longer desired: on to Desired, soon.
		{resultFailed, true, true, 2 * time.Second, false},
		{resultFailed, false, true, 2 * time.Second, false},
		{resultReleased, true, false, 0, true},
		{resultReleased, false, false, 0, true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s, open %v, behind %v", tc.r, tc.open, tc.behind), func(t *testing.T) {
			if wait, idle := again(tc.r, tc.open, tc.behind); wait != tc.wait || idle != tc.idle {
				t.Fatalf("again = %v, %v; want %v, %v", wait, idle, tc.wait, tc.idle)
			}
		})
	}
}

func TestCarried(t *testing.T) {
	cases := []struct {
		c      carrier
		state  coordinator.NodeStatus
		reason string
	}{
		{inLineJoin, coordinator.StateWaiting, ""},
		{inGrant, coordinator.StateReplacing, ""},
		{inReclaim, coordinator.StateReplacing, "recovering under its own slot"},
		{inFence, coordinator.StateReplacing, ""},
		{inVerify, coordinator.StateVerifying, ""},
	}
	for _, tc := range cases {
		t.Run(string(tc.state)+" "+tc.reason, func(t *testing.T) {
			if state, reason := carried(tc.c); state != tc.state || reason != tc.reason {
				t.Fatalf("carried(%d) = %q, %q; want %q, %q", tc.c, state, reason, tc.state, tc.reason)
			}
		})
	}
}
