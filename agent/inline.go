package agent

import (
	"context"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/wallclock"
)

// What a node watches while it waits in line: what no write to its group's
// KV announces, and which ends its wait when it changes.

// watchDown reads the workload's health while its node waits in line, and
// ends the wait (errWentDown) once it is down: the others count it against
// K from its check then, so it must claim its slot ahead of the line, or
// at K = 1 the head of the line would wait on it while it waits behind.
func (a *Agent) watchDown(ctx context.Context, stop context.CancelCauseFunc) {
	everyTick(ctx, HealthCheckInterval, func() bool {
		if h, _ := a.health.Health(ctx); h == HealthDown && ctx.Err() == nil {
			stop(errWentDown)
			return true
		}
		return false
	})
}

// everyTick runs look every d until it says it is done or ctx ends: the
// shape of every watch of a node in line.
func everyTick(ctx context.Context, d time.Duration, look func() (done bool)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if look() {
			return
		}
	}
}

// pollWatchInterval is how often a node in line reads again what its
// gate is judged on that no write to its KV announces: the checks its
// spec blocks on (update.block_on), the groups it waits for
// (update.after), the check that says which node goes last (update.last).
// A group that moves away from converged, or leadership that moves to this
// node, holds new grants within about this; a check the spec blocks on
// holds the grant itself, read once more right before it (acquire).
const pollWatchInterval = 2 * time.Second

// watchPolled reads those while the node waits in line, and ends the wait
// (errRecheck) once the gate closes on them.
func (a *Agent) watchPolled(ctx context.Context, stop context.CancelCauseFunc, gs *coordinator.GroupState) {
	everyTick(ctx, pollWatchInterval, func() bool {
		g := a.cfg.Store.Polled(ctx, gs, a.cfg.Node)
		if v := coordinator.Evaluate(coordinator.GateInput{Group: g, Now: wallclock.Now(), Mono: time.Now()}); !v.Open && ctx.Err() == nil {
			a.log.Info("leaving the line: the gate closed while the node waited", "reason", v.Reason)
			stop(errRecheck)
			return true
		}
		return false
	})
}

// memberWatchInterval is how often a node in line under a percentage of
// max_parallel counts the group's records: a listing of their names, so
// its cost grows with the group, and a group grows seldom.
const memberWatchInterval = 5 * time.Second

// watchMembers counts the group's records every memberWatchInterval while
// the node waits in line under a percentage of max_parallel, and ends the
// wait (errRecheck) once the count moved off the look's: the node looks
// again, so a group that grew grants with its larger K. A group that
// shrank needs no watch to be safe: the grant's check of the membership
// key refuses K of the larger group (lockstep.ErrGateStale).
func (a *Agent) watchMembers(ctx context.Context, stop context.CancelCauseFunc, looked int) {
	everyTick(ctx, memberWatchInterval, func() bool {
		n, err := a.cfg.Store.CountNodes(ctx, a.cfg.Group)
		if err == nil && n != looked && ctx.Err() == nil {
			a.log.Info("leaving the line to look again: the group's nodes changed while the node waited", "nodes", n, "looked", looked)
			stop(errRecheck)
			return true
		}
		return false
	})
}

// gateNow evaluates the gate on gs with the clock as it is now and, when
// its desired spec blocks on checks, their health read now, consistently:
// what Consul cannot check in a grant or a fence. It returns the group
// state it judged (gs with that health; nil health when nothing is
// blocked on), the verdict, and the wall clock it was judged at.
func (a *Agent) gateNow(ctx context.Context, gs *coordinator.GroupState) (*coordinator.GroupState, coordinator.Verdict, time.Time) {
	g := *gs
	if g.Spec != nil && g.Spec.Update.Blocks() {
		g.Health = a.cfg.Store.BlockHealthNow(ctx, &g.Spec.Update)
	}
	now := wallclock.Now()
	return &g, coordinator.Evaluate(coordinator.GateInput{Group: &g, Now: now, Mono: time.Now()}), now
}

// blockClosed is gateNow for the read right before a grant: the health of
// the checks blocked on, and the reason the gate is closed, or "" when it
// is open.
func (a *Agent) blockClosed(ctx context.Context, gs *coordinator.GroupState) (*coordinator.GateHealth, string) {
	g, v, _ := a.gateNow(ctx, gs)
	if !v.Open {
		return g.Health, v.Reason
	}
	return g.Health, ""
}
