package agent

import (
	"github.com/rollagent/rollagent/coordinator"
)

// Look is what one look of the agent saw: its workload, its node's own
// record and slot, and the gate. decide and underSlot are pure functions of
// it, so that every combination is table-tested without Consul or Docker;
// reconcile only carries out what they return.
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
		return Decision{State: l.ClosedState, Reason: l.Reason + "; an interrupted step is left as it is until the gate opens"}
	case (l.Leftover || l.Unverified) && l.Refused != "":
		return Decision{State: coordinator.StateFailed, Reason: l.Refused}
	case (l.Leftover || l.Unverified) && l.Down:
		// Down with its step unresolved: in line, the head would count it
		// and wait on it while it waits behind the head. It uses one of K
		// already, so it claims its slot and resolves the step first.
		return Decision{Plan: PlanClaimDown}
	case l.Leftover || l.Unverified:
		return Decision{Plan: PlanContend}
	case l.SHA == l.Desired && l.Down:
		// Converged, and down since: it counts against K, and says so.
		return Decision{State: coordinator.StateDown, Reason: "the workload is down: " + l.Why}
	case l.SHA == l.Desired:
		return Decision{State: coordinator.StateConverged}
	case !l.Open:
		return Decision{State: l.ClosedState, Reason: l.Reason}
	case l.Refused != "":
		return Decision{State: coordinator.StateFailed, Reason: l.Refused}
	case l.Down && l.SHA != "":
		return Decision{Plan: PlanClaimDown}
	}
	return Decision{Plan: PlanContend}
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

// underSlot is the first step of a node that holds its slot. With the gate
// closed (a CANCEL, a pause) nothing destructive runs, an undo included,
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
	case !l.Open:
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
