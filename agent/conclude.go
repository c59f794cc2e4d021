package agent

import (
	"cmp"

	"github.com/rollagent/rollagent/coordinator"
)

// end is how a turn's step ended, as the turn saw it: conclude makes of it
// the node's record and what becomes of its slot.
type end int

const (
	// endNothing: StepRelease, nothing to change.
	endNothing end = iota
	// endDown: StepKeep, down and not allowed to move.
	endDown
	// endVerified: what an interrupted step left passed its verification,
	// a SHA other than Desired, and what was set aside is dropped; the
	// Look is as after it.
	endVerified
	// endConverged: the node converged on Desired.
	endConverged
	// endPrepareFailed: Desired could not be prepared.
	endPrepareFailed
	// endPrepareStopped: the agent was asked to stop while it prepared
	// Desired under its slot (a pull): nothing was touched.
	endPrepareStopped
	// endStopped: cut off by its fence or a fault of the node's.
	endStopped
	// endRestoreFailed: the runtime failed the undo.
	endRestoreFailed
	// endUnread: the runtime could not be inspected at a look.
	endUnread
	// endUndoUnread: after the undo, the runtime could not be inspected.
	endUndoUnread
	// endUndone: the undo ran or nothing needed one; the Look is as after
	// it, Healthy included.
	endUndone
	// endDrainFailed: the local Consul agent refused or failed the drain
	// (update.drain), before anything of the workload was touched.
	endDrainFailed
	// endHeld: a hold closed the gate between the grant and the first
	// step (turn.heldBeforeStep): nothing was touched.
	endHeld
	// numEnds is one past the last end, for a test that takes each.
	numEnds
)

// event is what conclude needs to know of a step's end.
type event struct {
	end end
	// err is the error that ended the step, for the record's reason.
	err string
	// cause is the failure counted as the node's (endUndone), "" if none.
	cause string
	// failed is the SHA whose failure cause is (endUndone): the look's
	// Desired, or one desired no longer (a step resumed after a commit).
	failed string
}

// outcome is what a turn's end comes to: the node's state and reason for
// its record, and whether it gives its slot back with that record (in the
// release's transaction) or keeps its claim, for its next look to reclaim.
type outcome struct {
	Result result
	State  coordinator.NodeStatus
	Reason string
	// Keep ends the turn holding the slot: the claim stays.
	Keep bool
	// Replace goes on to replace the workload with Desired under the same
	// slot, after endVerified: nothing is published yet.
	Replace bool
	// Behind says the failure counted was of a SHA no longer desired: the
	// node is still behind Desired, which it has not failed, and looks
	// again soon to go on to it, rather than wait for desired to move.
	Behind bool
	// AtClock says the node, behind under a gate that the clock alone may
	// open (Look.Recheck: a stagger, a window, a poll), looks again then,
	// as an idle look does (Decision.AtClock), rather than wait for
	// desired to move.
	AtClock bool
}

// drainDeferred is added to the reason of a node whose drain failed.
const drainDeferred = "; nothing was stopped and no failure counted: the node gave its slot back and tries again later"

// prepareStopped begins the reason of a node whose prepare a stop cut off.
const prepareStopped = "the agent stopped while it prepared; nothing was touched: "

// heldUntouched is added to the reason of a node whose gate a hold closed
// before its first step.
const heldUntouched = "; the gate closed before the first step: nothing was touched, and the node gave its slot back"

// downKeeps is added to the reason of a node that keeps its slot because
// its workload is down.
const downKeeps = "; the workload is down, so the node keeps its slot"

// conclude is what the end of a turn's step leads to, given the look as it
// is after that step.
func conclude(l Look, e event) outcome {
	switch e.end {
	case endDown:
		return keptDown(l)
	case endVerified:
		if underSlot(l) == StepReplace {
			return outcome{Replace: true}
		}
		return released(l)
	case endConverged:
		return outcome{Result: resultSuccess, State: coordinator.StateConverged}
	case endPrepareFailed:
		return outcome{Result: resultAborted, State: coordinator.StateFailed, Reason: "prepare: " + e.err}
	case endPrepareStopped:
		// A pull is no step: cut off by a stop, it gives the slot back at
		// once (systemd's stop timeout would otherwise kill the agent
		// mid-wait), and the next process prepares afresh.
		return outcome{Result: resultAborted, State: coordinator.StateWaiting, Reason: prepareStopped + e.err}
	case endDrainFailed:
		// Nothing stopped: the slot goes back, for another node, and the
		// release is not charged with what only this node's Consul agent
		// or token does wrong. Tried again after a backoff (deferDrain).
		return outcome{Result: resultAborted, State: coordinator.StateFailed, Reason: e.err + drainDeferred}
	case endHeld:
		if !l.Healthy || l.Leftover {
			// Down, or a step of its own to finish: it must go on
			// counting against K (turn.heldBeforeStep never asks this).
			return outcome{Result: resultAborted, State: coordinator.StateWaiting, Reason: e.err, Keep: true}
		}
		return outcome{Result: resultAborted, State: coordinator.StateWaiting, Reason: e.err + heldUntouched}
	case endStopped:
		return outcome{Result: resultAborted, State: coordinator.StateWaiting, Reason: e.err, Keep: true}
	case endRestoreFailed:
		return outcome{Result: resultAborted, State: coordinator.StateFailed, Reason: "restoring the old workload: " + e.err, Keep: true}
	case endUnread:
		return outcome{Result: resultAborted, State: coordinator.StateUnknown, Reason: e.err}
	case endUndoUnread:
		// Whether the restored workload is up cannot be told: the node
		// keeps its slot, and its next look sees.
		return outcome{Result: resultKept, State: coordinator.StateUnknown, Reason: "after the undo: " + e.err, Keep: true}
	case endUndone:
		return undone(l, e.cause, e.failed)
	}
	return released(l)
}

// keptDown is the end of a node that keeps its slot while down: the gate
// is closed, or it is open but the node may not move (its release was
// refused, or its claim had lapsed).
func keptDown(l Look) outcome {
	o := outcome{Result: resultKept, Keep: true, State: coordinator.StateWaiting, Reason: "its claim had lapsed before it was back"}
	switch {
	case !l.stepping():
		o.State, o.Reason = l.ClosedState, l.Reason
	case l.Refused != "":
		o.State, o.Reason = coordinator.StateFailed, l.Refused
	}
	o.Reason += downKeeps
	if !l.stepping() {
		o.Reason += " until " + cmp.Or(l.Opens, coordinator.NewCommitOpens) + " to recover under"
		o.AtClock = l.Recheck > 0
	}
	return o
}

// released is the end of a node that gives its slot back with nothing
// more to do under it: its record says what decide makes of it without
// its claim, or waiting, when that is to take the slot again (yielded).
func released(l Look) outcome {
	state, reason, idle := settled(l)
	if !idle {
		return outcome{Result: resultYielded, State: state, Reason: reason}
	}
	return outcome{Result: resultReleased, State: state, Reason: reason, AtClock: atClock(l)}
}

// atClock says a node at l, its claim gone, waits for the gate's clock
// (Decision.AtClock): it is behind under a gate the clock may open.
func atClock(l Look) bool {
	l.Claimed, l.Undoing = false, ""
	return decide(l).AtClock
}

// undone is the end of an undo: a failure of failed, when one is counted;
// and the node keeps its slot while what it brought back is down. A
// failure of a SHA no longer desired (a step of it resumed by a look that
// came after a new commit) leaves the node behind on Desired: it goes on.
func undone(l Look, cause, failed string) outcome {
	state, reason, _ := settled(l)
	r := resultAborted
	if cause != "" {
		state, reason, r = coordinator.StateFailed, cause, resultFailed
	}
	if !l.Healthy && (l.SHA != "" || l.Leftover) {
		return outcome{Result: resultKept, Keep: true, State: state, Reason: reason + downKeeps}
	}
	return outcome{Result: r, State: state, Reason: reason, Behind: cause != "" && failed != l.Desired}
}
