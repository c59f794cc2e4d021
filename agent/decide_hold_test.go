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

// awaiting is l for a node that is no canary, while the canaries of an
// auto-promoted rollout have not been healthy long enough: the gate is
// closed to it outright, and the clock alone may open it.
func awaiting(l Look) Look {
	l.Desired, l.Open, l.Recheck = shaB, false, 5*time.Second
	l.ClosedState, l.Reason = coordinator.StateWaiting, "awaiting promotion: canaries c1"
	return l
}

// A turn that ends behind, under a gate that the clock alone may open
// (a stagger, a maintenance window, an auto-promotion, a polled rule),
// looks again by then, as an idle look does: a node that waited for
// desired to move would stay behind until its resync, after the rest of
// the rollout went on without it.
func TestConcludeAtClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		look Look
		ev   event
		want bool
	}{
		{"reclaimed under a hold, healthy and behind: released", held(Look{SHA: shaA, Healthy: true, Reclaimed: true}), event{end: endNothing}, true},
		{"reclaimed under a hold, verified an older SHA: released", held(Look{SHA: shaC, Healthy: true, Reclaimed: true}), event{end: endVerified}, true},
		{"reclaimed awaiting promotion, healthy: released", awaiting(Look{SHA: shaA, Healthy: true, Reclaimed: true}), event{end: endNothing}, true},
		{"reclaimed awaiting promotion, a step left healthy: released", awaiting(Look{SHA: shaC, Leftover: true, Healthy: true, Reclaimed: true}), event{end: endNothing}, true},
		{"reclaimed awaiting promotion, down: kept", awaiting(Look{SHA: shaA, Reclaimed: true}), event{end: endDown}, true},
		{"converged under a hold: nothing to look for", held(Look{SHA: shaB, Healthy: true, Reclaimed: true}), event{end: endNothing}, false},
		{"refused under a hold: as its idle look would", held(Look{SHA: shaA, Healthy: true, Reclaimed: true, Refused: "x"}), event{end: endNothing}, true},
		{"cancelled: only a commit opens it", cancelled(Look{SHA: shaA, Healthy: true, Reclaimed: true}), event{end: endNothing}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if o := conclude(tc.look, tc.ev); o.AtClock != tc.want {
				t.Fatalf("conclude = %+v, want AtClock %v", o, tc.want)
			}
		})
	}
}
