package agent

import (
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// Look is what one look of the agent saw: its workload, its node's own
// record and slot, and the gate. decide, underSlot and conclude are pure
// functions of it, so that every combination is table-tested without
// Consul or Docker: every choice of a look is theirs, the state and reason
// the node publishes included, and reconcile and the turn only carry out
// what they return.
type Look struct {
	// Unreadable says the desired record exists but does not decode.
	Unreadable bool
	// Desired is the desired SHA, "" when nothing is committed.
	Desired string
	// Open is the gate for Desired; ClosedState and Reason say why it is
	// not, as the node's state (cancelled, paused or waiting) and a
	// reason, and Opens what opens it (coordinator.Verdict).
	Open        bool
	ClosedState coordinator.NodeStatus
	Reason      string
	Opens       string
	// Hold says the gate is closed to new grants only (a maintenance
	// window, coordinator.Verdict.Hold): a node that holds its slot goes
	// on as under an open gate, one that does not waits.
	Hold bool
	// Recheck is how long until the gate may change by the clock alone (a
	// maintenance window opens or closes), 0 when only a write to Consul
	// can change it: a node looks again by then, and leaves the line then.
	Recheck time.Duration
	// recheckAt is when Recheck ends, on this process's monotonic clock:
	// what comes between the look and the wait in line (a pull, the
	// session) does not move it.
	recheckAt time.Time
	// Refused is why this node will not move to Desired although the gate
	// is open: a failure of its own recorded for it, or a spec its host
	// does not allow. "" when none.
	Refused string

	// SHA is what runs now, "" for nothing managed.
	SHA string
	// Leftover says an interrupted step left the old workload set aside.
	Leftover bool
	// Healthy is the workload's health at this look.
	Healthy bool
	// Down says the workload is down by a sustained signal (HealthDown):
	// its check is critical, and other nodes count it against K. A
	// workload that is not healthy yet (HealthFailing) is neither.
	Down bool
	// Why is the runtime's word on the workload's health.
	Why string
	// Unverified says the node's own record shows it heading for SHA and
	// never converged on it: a step was cut off before it saw it healthy.
	Unverified bool
	// Claimed says the slot record keeps a claim for this node: a step of
	// its own was cut off (its process died, its release or its grant's
	// reply was lost), and the node still holds its slot.
	Claimed bool
	// Lapsed says the node's claim had stopped counting when this process
	// reclaimed it (lockstep.Hold.Lapsed): another node may hold a slot in
	// its place, so it resolves what its step left and moves no further.
	Lapsed bool
	// Reclaimed says the slot was taken back (Reclaim, or claimed because
	// the node was down), not granted in line: no grant counted the nodes
	// down since. It resolves what a step left, and replaces a node that
	// is down; a healthy node's next step takes a fresh grant.
	Reclaimed bool
	// Undoing is the SHA whose undo this process began, behind its fence,
	// and could not finish (the runtime failed it): it is carried on under
	// the node's slot whatever the gate says now, as a step that passed
	// its fence runs to its end. A restarted process knows of none.
	Undoing string
}

// Plan is what a look leads to.
type Plan int

const (
	// PlanIdle: nothing to do but publish State.
	PlanIdle Plan = iota
	// PlanReclaim: take back this node's slot, before anything else, and
	// then act under it (underSlot).
	PlanReclaim
	// PlanContend: wait in line for a slot and act under it (underSlot).
	PlanContend
	// PlanClaimDown: the workload is down (Look.Down: a sustained signal,
	// which makes the others count it against K) and behind: claim the
	// node's slot at once (it uses one of K already), then reclaim it,
	// ahead of the line, so that the nodes that are down are healed first.
	PlanClaimDown
)

// Decision is a Plan, with the node's state and its reason when idle.
type Decision struct {
	Plan   Plan
	State  coordinator.NodeStatus
	Reason string
	// Again is how soon an idle node looks again without a change to
	// desired (before jitter), 0 to wait for one.
	Again time.Duration
	// AtClock says Again is when the clock alone opens the gate (Recheck):
	// the node looks after it, not before, so that it looks once.
	AtClock bool
	// Step is the first step under the slot of a node that waits in line
	// (PlanContend), as this look sees it. A node that reclaims its slot
	// learns its step once it holds it (underSlot), from a look that the
	// reclaim completes.
	Step Step
	// Prepare says Desired is prepared before the node takes its slot: its
	// first step, as this look sees it, replaces the workload. A pull then
	// takes nothing from the slot's time.
	Prepare bool
}

// decide is the choice of one look. An interrupted step is never resolved
// outside a slot: the node reclaims its own, or waits in line for one while
// the gate is open, and touches nothing while it is closed.
func decide(l Look) Decision {
	switch {
	case l.Unreadable:
		return Decision{State: coordinator.StateWaiting, Reason: "the desired record is unreadable; touching nothing until it is fixed"}
	case l.Claimed:
		return Decision{Plan: PlanReclaim}
	case l.Desired == "":
		return Decision{}
	case (l.Leftover || l.Unverified) && !l.Open:
		return Decision{State: l.ClosedState, Reason: l.Reason + "; an interrupted step is left as it is until the gate opens", Again: l.Recheck, AtClock: l.Recheck > 0}
	case (l.Leftover || l.Unverified) && l.Refused != "":
		return Decision{State: coordinator.StateFailed, Reason: l.Refused}
	case (l.Leftover || l.Unverified) && l.Down:
		// Down with its step unresolved: in line, the head would count it
		// and wait on it while it waits behind the head. It uses one of K
		// already, so it claims its slot and resolves the step first.
		return inLine(l, PlanClaimDown)
	case l.Leftover || l.Unverified:
		return inLine(l, PlanContend)
	case l.SHA == l.Desired && l.Down:
		// Converged, and down since: it counts against K, and says so; it
		// looks again soon, to say converged again once it is back.
		return Decision{State: coordinator.StateDown, Reason: "the workload is down: " + l.Why, Again: retryPause}
	case l.SHA == l.Desired:
		return Decision{State: coordinator.StateConverged}
	case !l.Open:
		return Decision{State: l.ClosedState, Reason: l.Reason, Again: l.Recheck, AtClock: l.Recheck > 0}
	case l.Refused != "":
		return Decision{State: coordinator.StateFailed, Reason: l.Refused}
	case l.Down && l.SHA != "":
		return inLine(l, PlanClaimDown)
	}
	return inLine(l, PlanContend)
}

// inLine is the decision of a node that takes its slot by plan, in line or
// ahead of it (PlanClaimDown): a step that replaces at once is prepared
// before, so that the pull takes nothing from the slot's time.
func inLine(l Look, plan Plan) Decision {
	d := Decision{Plan: plan, Step: underSlot(l)}
	d.Prepare = d.Step == StepReplace
	return d
}

// Step is what a node that holds its slot does first.
type Step int

const (
	// StepRelease: nothing to change; give the slot back.
	StepRelease Step = iota
	// StepKeep: touch nothing and keep the slot: the node is down because
	// of the rollout and the gate forbids any move, so it must keep
	// counting against K. The next look reclaims it.
	StepKeep
	// StepVerify: verify what runs for min_healthy_time; then finish (drop
	// what was set aside) and go on to Desired if that is something else,
	// or undo it under the slot and count a failure.
	StepVerify
	// StepReplace: replace the workload with Desired.
	StepReplace
	// StepUndo: bring back what was set aside (Undoing, or what runs),
	// under the node's slot and behind the gate; or carry on with an undo
	// this process began behind its fence (Undoing), whatever the gate.
	StepUndo
)

// stepping says a node that holds its slot may step: the gate is open,
// or closed to new grants only (Hold).
func (l Look) stepping() bool { return l.Open || l.Hold }

// underSlot is the first step of a node that holds its slot. A gate closed
// to new grants only (Hold: outside a maintenance window) lets it go on as
// an open one. With the gate closed (a CANCEL, a pause) nothing destructive runs, an undo included,
// but one this process began behind a passed fence (Undoing): a healthy
// workload of any SHA stays, whatever is set aside beside it, and the slot
// goes back; one that is down keeps its slot, so that it still counts,
// until a new commit opens a gate. With the gate open, an interrupted step
// is verified before anything else, so that an old workload is dropped
// only after the new one passed min_healthy_time.
func underSlot(l Look) Step {
	interrupted := l.Leftover || l.Unverified
	switch {
	case l.Undoing != "":
		return StepUndo
	case !l.stepping():
		return closedStep(l)
	case l.Lapsed:
		return lapsedStep(l)
	case interrupted:
		return StepVerify
	case l.SHA == l.Desired && l.Healthy:
		return StepRelease
	case l.SHA == l.Desired:
		return StepVerify
	case l.Refused != "":
		if l.Healthy || l.SHA == "" {
			return StepRelease
		}
		return StepKeep
	case l.Reclaimed && l.Healthy:
		// Taking a healthy node down is a new step: in line, where the
		// grant counts every node down now.
		return StepRelease
	}
	return StepReplace
}

// closedStep is what a node under a closed gate does with its slot: it
// gives it back when nothing it runs is down (a healthy workload, or none
// managed, with nothing set aside), and keeps it otherwise.
func closedStep(l Look) Step {
	if l.Healthy || l.SHA == "" && !l.Leftover {
		return StepRelease
	}
	return StepKeep
}

// lapsedStep is what a node whose claim had lapsed may do, behind an open
// gate: keep what is healthy, bring back what was set aside, or keep
// counting while down.
func lapsedStep(l Look) Step {
	switch {
	case l.Healthy || l.SHA == "" && !l.Leftover:
		return StepRelease
	case l.Leftover:
		return StepUndo
	}
	return StepKeep
}

// settled is the state and reason of a node whose step is over, its claim
// gone: what decide makes of it when idle, or waiting when it would take a
// slot again.
func settled(l Look) (coordinator.NodeStatus, string, bool) {
	l.Claimed, l.Undoing = false, ""
	d := decide(l)
	if d.Plan != PlanIdle || d.State == "" {
		return coordinator.StateWaiting, d.Reason, false
	}
	return d.State, d.Reason, true
}

// again is how soon a node looks again after a turn that ended with r
// (before jitter), 0 to wait for desired to move; idle says it has nothing
// to contend for until then. behind is outcome.Behind: a failure of a SHA
// no longer desired, after which waiting for desired to move would leave
// the node behind for good.
func again(r result, open, behind bool) (wait time.Duration, idle bool) {
	switch {
	case r == resultFailed && behind:
		return 2 * time.Second, false
	}
	switch r {
	case resultAborted, resultYielded:
		// Aborted, the claim stays in Consul: the next look, soon, takes
		// it back under the gate as it is then. Yielded, the node is
		// behind still, with its slot given back: into the line again.
		return 2 * time.Second, false
	case resultKept:
		if open {
			// A failure that did not close the gate: the workload may be
			// healthy again soon, and its slot should not wait a resync.
			return retryPause, false
		}
		return 0, false // nothing may move until desired does
	}
	return 0, true
}

// carrier is a write that carries the node's record with it, in a
// transaction of lockstep's or in the service's registration.
type carrier int

const (
	// inLineJoin: the node takes its place in line, or registers its
	// session's check to do so.
	inLineJoin carrier = iota
	// inGrant: the grant of its slot.
	inGrant
	// inReclaim: its claim, taken back.
	inReclaim
	// inFence: a fence (or a check of the slot alone) before a step.
	inFence
	// inVerify: written once a verification takes long
	// (verifyRecordAfter), not in a transaction.
	inVerify
)

// carried is the node's state, and reason, in the record that c carries:
// waiting in line, verifying, and replacing from the grant on.
func carried(c carrier) (coordinator.NodeStatus, string) {
	switch c {
	case inLineJoin:
		return coordinator.StateWaiting, ""
	case inReclaim:
		return coordinator.StateReplacing, "recovering under its own slot"
	case inVerify:
		return coordinator.StateVerifying, ""
	}
	return coordinator.StateReplacing, ""
}
