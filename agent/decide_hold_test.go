package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// held is l outside a maintenance window: the gate is closed to new
// grants only, and opens again in an hour by the clock alone.
func held(l Look) Look {
	l.Desired, l.Open, l.Hold, l.Recheck = shaB, false, true, time.Hour
	l.ClosedState, l.Reason = coordinator.StateWaiting, "outside the maintenance window; the next opens Tue 02:00 UTC"
	return l
}

// Outside a maintenance window no node takes a slot, and each looks
// again when the window opens; a node that holds its slot goes on with
// its step as under an open gate.
func TestDecideHeld(t *testing.T) {
	for _, tc := range []struct {
		name  string
		look  Look
		plan  Plan
		state coordinator.NodeStatus
		again time.Duration
	}{
		{"behind: waits for the window", held(Look{SHA: shaA, Healthy: true}), PlanIdle, coordinator.StateWaiting, time.Hour},
		{"behind and down: takes no slot, not even its own", held(Look{SHA: shaA, Down: true}), PlanIdle, coordinator.StateWaiting, time.Hour},
		{"interrupted, no claim: waits for the window", held(Look{SHA: shaB, Leftover: true}), PlanIdle, coordinator.StateWaiting, time.Hour},
		{"a claim of its own is reclaimed: its step goes on", held(Look{SHA: shaA, Claimed: true}), PlanReclaim, "", 0},
		{"converged: nothing to do", held(Look{SHA: shaB, Healthy: true}), PlanIdle, coordinator.StateConverged, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.look)
			if d.Plan != tc.plan || d.State != tc.state || d.Again != tc.again || d.AtClock != (tc.again > 0) {
				t.Fatalf("decide = %+v, want plan %d state %q again %s", d, tc.plan, tc.state, tc.again)
			}
			if d.Plan == PlanIdle && d.State == coordinator.StateWaiting && !strings.HasPrefix(d.Reason, "outside the maintenance window") {
				t.Errorf("reason %q does not say why it waits", d.Reason)
			}
		})
	}
	for _, tc := range []struct {
		name string
		look Look
		want Step
	}{
		{"holder, behind: replaces", held(Look{SHA: shaA, Healthy: true}), StepReplace},
		{"holder, interrupted: verifies", held(Look{SHA: shaB, Leftover: true, Healthy: true}), StepVerify},
		{"holder, converged and healthy: releases", held(Look{SHA: shaB, Healthy: true}), StepRelease},
		{"holder, reclaimed and down: replaces under its own claim", held(Look{SHA: shaA, Reclaimed: true, Down: true}), StepReplace},
		{"holder, refused and down: keeps its slot", held(Look{SHA: shaA, Refused: "x"}), StepKeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := underSlot(tc.look); got != tc.want {
				t.Fatalf("underSlot = %d, want %d", got, tc.want)
			}
		})
	}
	if o := keptDown(held(Look{SHA: shaA, Refused: "failed before"})); o.State != coordinator.StateFailed || strings.Contains(o.Reason, "maintenance") {
		t.Errorf("a holder kept down outside a window is kept for its own failure, got %+v", o)
	}
}
