package agent

import (
	"context"
	"math"
	"time"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

// DefaultPrepareTimeout bounds Runtime.Prepare (an image pull) when it
// runs under the node's slot, for a runtime that does not say
// (PrepareTimeout): nothing unbounded may run inside a hold, as the
// node's lease must outlast all of it (Agent.lease). A pull cut off there
// is not lost: the next look pulls again before it takes a slot, with no
// bound, and Docker keeps the layers it has.
const DefaultPrepareTimeout = 2 * time.Minute

// fenceFresh is how long a passed fence vouches for the destructive call
// right after it. A process paused after its fence (SIGSTOP, a frozen VM)
// for longer than its session's TTL plus its claim's lease may find its
// slot given to another node by the time it runs again: so a step whose
// fence took longer than this to come back is fenced again. A pause after
// the fence came back, before the call, is the window no check can close. It is far less than the shortest
// session TTL (MinSessionTTL), which is far less than any lease.
const fenceFresh = 500 * time.Millisecond

// refences bounds how many times in a row a step is fenced again because
// its fence came back later than fenceFresh (a slow Consul): then the
// step is stopped, the node keeps its slot, and its next look goes on.
const refences = 3

// whileHeld returns ctx, cancelled with lockstep.ErrSessionLost as soon as
// the hold is lost: for the waits under the slot that change nothing (a
// health check, a pull). A process whose session ended while it lived (a
// liveness blip) must not go on waiting under a slot it may be losing: it
// stops, and its next look makes a new session and reclaims its claim,
// which renews it, well within the lease that waiters start counting only
// once they see the session gone.
func (t *turn) whileHeld(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-t.hold.Lost():
			cancel(lockstep.ErrSessionLost)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// lost says the hold is gone (Hold.Lost).
func (t *turn) lost() bool {
	select {
	case <-t.hold.Lost():
		return true
	default:
		return false
	}
}

// verifyHeld is Agent.verify for as long as the slot is held; lost says it
// was cut off because the hold was lost, and err is then not the
// workload's.
func (t *turn) verifyHeld(ctx context.Context, sha string) (lost bool, err error) {
	vctx, cancel := t.whileHeld(ctx)
	defer cancel()
	err = t.a.verify(vctx, t.gs.Spec, sha)
	return err != nil && t.lost(), err
}

// prepareHeld is Runtime.Prepare under the slot: bounded, and cut off if
// the hold is lost or the agent is asked to stop (stopped). Unlike a step,
// a prepare touches nothing, so a stop need not wait for it: a pull from a
// registry that stalls would hold the stop for the pull's whole bound.
func (t *turn) prepareHeld(ctx context.Context, sha string) (lost, stopped bool, err error) {
	pctx, cancel := t.whileHeld(ctx)
	defer cancel()
	pctx, cancelT := context.WithTimeout(pctx, t.a.prepareTimeout())
	defer cancelT()
	if t.stopping != nil {
		stop := context.AfterFunc(t.stopping, cancelT)
		defer stop()
	}
	err = t.a.cfg.Runtime.Prepare(pctx, t.gs.Spec, sha)
	return err != nil && t.lost(), err != nil && t.stopping != nil && t.stopping.Err() != nil, err
}

// execPrepareTimeout bounds the exec runtime's Prepare, a write of the
// spec to a local file: with the default, a pull's bound, it would add two
// minutes to every exec node's lease for nothing.
const execPrepareTimeout = 10 * time.Second

// PrepareTimeout bounds Prepare under the node's slot.
func (e *Exec) PrepareTimeout() time.Duration { return execPrepareTimeout }

// prepareTimeout bounds Runtime.Prepare under the slot.
func (a *Agent) prepareTimeout() time.Duration {
	if b, ok := a.cfg.Runtime.(interface{ PrepareTimeout() time.Duration }); ok {
		return b.PrepareTimeout()
	}
	return DefaultPrepareTimeout
}

// holdBound is the longest that one hold can keep working on the node
// without Consul, as a holder cut off from it does: verifying what an
// interrupted step left, pulling the next release, replacing and
// verifying it, each within its own bound.
func (a *Agent) holdBound(spec *hashspec.Spec) time.Duration {
	hd := hashspec.DefaultHealthyDeadline.Std()
	var drain time.Duration // under the slot: its calls, its wait for the catalog, its delay
	if spec != nil {
		hd = spec.Update.HealthyDeadline.Std()
		if spec.Update.Drain != nil {
			drain = addBounds(drainCalls*drainCallTimeout, spec.Update.Drain.Delay.Std())
		}
	}
	return addBounds(hd, a.prepareTimeout(), a.stepTimeout(), hd, drain)
}

// addBounds adds durations, stopping at the largest one instead of
// wrapping: a lease that wrapped negative would make a grant write no
// claim at all. Validated specs and flags keep far below it anyway.
func addBounds(ds ...time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		if d > 0 && sum > math.MaxInt64-d {
			return math.MaxInt64
		}
		sum += d
	}
	return sum
}

// heldBeforeStep evaluates the gate once more right before the first
// destructive step of a replacement of a healthy workload with nothing
// set aside, on the clock and the health of the checks blocked on as they
// are now: the two things Consul cannot check in a fence. A maintenance
// window that closed or a check that failed since the grant (or since a
// verification under the slot, and a pull after it, which may take
// minutes) gives the slot back untouched; its reason is returned, "" if
// the node goes on. Only a rule that says so (coordinator.Closed.
// BeforeStep) is judged: one that closes the gate outright is left to the
// fences, and a node whose step began finishes it, as a hold lets it. A
// workload read unhealthy now goes on too: replacing it is what heals it.
// The Consul read is bounded as a fence is; both are cut off with the
// hold.
func (t *turn) heldBeforeStep(ctx context.Context) string {
	if !t.l.Healthy || t.l.Leftover {
		return ""
	}
	ctx, cancel := t.whileHeld(ctx)
	defer cancel()
	gctx, cancelG := context.WithTimeout(ctx, t.a.cfg.SessionTTL*2/3)
	g, v, now := t.a.gateNow(gctx, t.gs)
	cancelG()
	if v.Open || !v.BeforeStep {
		return ""
	}
	// The health is read as a look reads it, within the runtime's own
	// bounds (a health hook's timeout): a shorter one would cut a slow
	// hook off, and the judge would count that as a failed reading.
	l := t.l
	l.readHealth(ctx, t.a.health)
	if read := ctx.Err() == nil; read && !l.Healthy {
		// A reading cut off says nothing: the slot goes back, and the
		// next look sees the workload as it is.
		t.l = l
		t.a.log.Info("the gate closed since the grant, but the workload is not healthy: replacing it", "reason", v.Reason, "health", l.Why)
		return ""
	}
	// The record the release writes says which gate holds it, and since
	// when a check does, as a look's would.
	t.a.pub.sawGate(v, g, now)
	return v.Reason
}
