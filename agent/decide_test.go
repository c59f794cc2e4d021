package agent

import (
	"testing"

	"github.com/rollagent/rollagent/coordinator"
)

const (
	shaA = "a"
	shaB = "b"
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
