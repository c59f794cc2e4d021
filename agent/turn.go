package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/lockstep"
)

const (
	// DefaultStepTimeout bounds one destructive call of a runtime that
	// does not say how long its steps take (StepTimeout): a Docker
	// rename, stop, create and start.
	DefaultStepTimeout = 30 * time.Second
	// settleTimeout bounds recording a failure and releasing: each is
	// retried on a fresh context until it lands or this passes.
	settleTimeout = time.Minute
)

// result is how a turn under the slot ended.
type result string

const (
	resultSuccess  result = "success"  // the node converged on the desired SHA
	resultFailed   result = "failed"   // the release failed on the node, counted once
	resultAborted  result = "aborted"  // stopped by its fence or a fault of the node's: the claim stays, look again soon
	resultKept     result = "kept"     // down and the gate forbids any move: the claim stays until desired moves
	resultReleased result = "released" // nothing to change
	resultYielded  result = "yielded"  // released to go on in line: look again soon
)

// ending is how a turn ended, and the node's record then: written already
// with the release, or for the look to publish.
type ending struct {
	result result
	// behind is outcome.Behind: a failure of a SHA no longer desired.
	behind bool
	// atClock is outcome.AtClock: the node looks again when the gate's
	// clock may open it (Look.Recheck).
	atClock bool
	n       coordinator.NodeState
	// retry, when not 0, is how soon the node looks again, instead of
	// what its result says (again): a backoff of its own.
	retry time.Duration
}

// turn is one hold of the node's slot: what underSlot says, carried out.
type turn struct {
	a    *Agent
	hold *lockstep.Hold
	gs   *coordinator.GroupState
	l    Look
	// prepared says Prepare ran for Desired before the slot was taken
	// (reconcile does, for a turn won in line that replaces at once).
	prepared bool
	// fenced is when the last fence's transaction returned OK.
	fenced time.Time
	// stopping ends when the agent is asked to stop: a step cut off then
	// is not left for a next look that will not come.
	stopping context.Context
}

// run carries out step, the turn's first. A signal now must not leave the
// workload half replaced: the step runs to its end, or to a state its next
// look resolves, on a context of its own, each call within its own bound.
func (t *turn) run(ctx context.Context, step Step) ending {
	t.stopping = ctx
	ctx = context.WithoutCancel(ctx)
	switch step {
	case StepKeep:
		o := conclude(t.l, event{end: endDown})
		t.a.log.Warn("the workload is down and may not move: touching nothing, keeping the node's slot", "reason", o.Reason)
		return t.keep(ctx, o)
	case StepVerify:
		return t.verify(ctx)
	case StepReplace:
		return t.replace(ctx)
	case StepUndo:
		return t.undoDown(ctx)
	}
	return t.release(ctx, t.l.SHA, conclude(t.l, event{end: endNothing}))
}

// verify waits for what an interrupted step left to be healthy, then drops
// what was set aside and goes on to the desired SHA; or undoes it.
func (t *turn) verify(ctx context.Context) ending {
	sha := t.l.SHA
	if sha == "" { // cut off before a new workload started: nothing to verify
		return t.undo(ctx, "", nil, true)
	}
	if err := t.step(ctx, sha, "verify"); err != nil {
		return t.stopped(ctx, err)
	}
	if lost, err := t.verifyHeld(ctx, sha); lost {
		return t.stopped(ctx, lockstep.ErrSessionLost)
	} else if err != nil {
		if errors.Is(err, errInterrupted) || errors.Is(err, errUnreachable) {
			// Never started, or stopped with its node and never started
			// again: the step was cut off, the release did not fail.
			// Undone, the node is replaced afresh at its next turn.
			return t.undo(ctx, sha, nil, true)
		}
		// With nothing set aside there is nothing to bring back, and
		// removing what runs would leave the node with nothing at all.
		return t.undo(ctx, sha, err, t.l.Leftover)
	}
	if sha == t.l.Desired {
		return t.finish(ctx, sha)
	}
	if t.l.Leftover {
		if err := t.held(ctx, "drop the old workload"); err != nil {
			return t.stopped(ctx, err)
		}
		if err := t.a.cfg.Runtime.Finish(ctx); err != nil {
			return t.stopped(ctx, err)
		}
	}
	t.l.SHA, t.l.Leftover, t.l.Unverified, t.l.Healthy = sha, false, false, true
	// Refused, it moves no further; reclaimed, up again on what its step
	// left, going on to Desired takes it down anew, which takes a grant
	// that counts every node down now (conclude).
	if o := conclude(t.l, event{end: endVerified}); !o.Replace {
		return t.release(ctx, sha, o)
	}
	// The look that won this slot by contending verified first, so it
	// prepared nothing for Desired (reconcile prepares only a step that
	// replaces at once): replace must prepare, as after a reclaim.
	t.prepared = false
	return t.replace(ctx)
}

// replace swaps the workload for the desired SHA, fencing each step, and
// verifies it. A step stopped by its fence or by a fault of the node's is
// not undone here: the node keeps its slot, and its next look decides
// under the gate as it is then.
func (t *turn) replace(ctx context.Context) ending {
	rt, sha := t.a.cfg.Runtime, t.l.Desired
	if !t.prepared {
		// Not prepared before a place in line was taken: reclaimed, or
		// going on from a verified step.
		if lost, stopped, err := t.prepareHeld(ctx, sha); lost {
			return t.stopped(ctx, lockstep.ErrSessionLost)
		} else if stopped {
			return t.release(ctx, t.l.SHA, conclude(t.l, event{end: endPrepareStopped, err: err.Error()}))
		} else if err != nil {
			return t.release(ctx, t.l.SHA, conclude(t.l, event{end: endPrepareFailed, err: err.Error()}))
		}
	}
	if reason := t.heldBeforeStep(ctx); reason != "" {
		t.a.log.Info("not replacing: a hold closed the gate since the grant; giving the slot back untouched", "reason", reason)
		o := conclude(t.l, event{end: endHeld, err: reason})
		if o.Keep {
			return t.keep(ctx, o)
		}
		return t.release(ctx, t.l.SHA, o)
	}
	// Drained before the first step, with an old workload to stop: out
	// of the runtime's call, which its step bound limits.
	drained := t.gs.Spec.Update.Drain != nil && t.l.SHA != ""
	if drained {
		if err := t.drain(ctx); err != nil {
			if t.drainRefused(err) {
				return t.deferDrain(ctx, err)
			}
			return t.stopped(ctx, err)
		}
		t.a.drainRetry().Reset()
	}
	touched := false
	rctx, cancel := context.WithTimeout(ctx, t.a.stepTimeout())
	err := rt.Replace(rctx, t.gs.Spec, sha, t.stepFunc(&touched))
	cancel()
	if err != nil && drained && !touched {
		t.a.undrain(ctx, drainRefused, false, true) // nothing was touched
	}
	if err == nil {
		var lost bool
		if lost, err = t.verifyHeld(ctx, sha); lost {
			// Not the release's failure: the node's next look reclaims
			// its slot and verifies again.
			return t.stopped(ctx, lockstep.ErrSessionLost)
		}
	} else if stoppedByFault(err) {
		return t.stopped(ctx, err)
	} else if t.cutOffByStop(err) {
		return t.undo(ctx, sha, nil, true) // undone and released, no failure counted
	}
	if err != nil {
		return t.undo(ctx, sha, err, true)
	}
	return t.finish(ctx, sha)
}

// stepFunc fences each step of a replacement, noting in touched that one
// passed its fence. Every step is fenced, the first too: the grant checked
// the gate as of the grant, and a CANCEL applied between it and the step
// must stop the step. What a CANCEL cannot stop is the gap from a fence to
// the runtime's call, measured here.
func (t *turn) stepFunc(touched *bool) StepFunc {
	return func(ctx context.Context, name string) error {
		if err := t.step(ctx, t.l.SHA, name); err != nil {
			return err
		}
		*touched = true
		t.a.stepGap(name, time.Since(t.fenced))
		return nil
	}
}

// finish drops what was set aside, once the new workload passed
// min_healthy_time, and releases the slot with the node converged. The
// drop is fenced by the gate like every destructive step: a CANCEL that
// came during the verification stops it, and the node's next look, under
// its slot, releases it on its verified workload with the old one still
// set aside, until a new commit.
func (t *turn) finish(ctx context.Context, sha string) ending {
	t.a.undrain(ctx, drainConverged, true, true)
	obs, err := t.a.cfg.Runtime.Inspect(ctx)
	if err == nil {
		t.a.pub.observe(obs) // the record that says converged names the new image
	}
	converged := conclude(t.l, event{end: endConverged})
	if err == nil && !obs.Leftover {
		return t.release(ctx, sha, converged)
	}
	if err := t.held(ctx, "drop the old workload"); err != nil {
		return t.stopped(ctx, err)
	}
	if err := t.a.cfg.Runtime.Finish(ctx); err != nil {
		t.a.log.Warn("new workload is healthy but the old one was not removed; the next look removes it", "error", err)
	}
	return t.release(ctx, sha, converged)
}

// stoppedByFault says err stopped a step through no fault of the release.
func stoppedByFault(err error) bool {
	var fe *fenceError
	return errors.As(err, &fe) || errors.Is(err, errInterrupted) || errors.Is(err, errUnreachable) || errors.Is(err, errSetAside) ||
		errors.Is(err, errDrain)
}

// undo brings back what was set aside, under the slot and behind the gate,
// and counts cause, if any, as the node's failure to reach sha. The node
// keeps its slot while its workload is still down. A fence that fails,
// the gate closed or Consul out of reach, leaves everything as it is under
// the node's claim. An undo that passed its fence runs to its end: if the
// runtime fails it, this process carries on with it (Agent.undoing) at its
// next looks, checking its slot only, whatever the gate says then.
func (t *turn) undo(ctx context.Context, sha string, cause error, restore bool) ending {
	var rerr error
	if restore {
		fence := t.held
		if t.l.Undoing != "" && t.l.Undoing == sha {
			fence = t.carryOn
		}
		if err := fence(ctx, "undo"); err != nil {
			return t.stopped(ctx, err)
		}
		rerr = t.restore(ctx, sha)
	}
	if cause != nil {
		if rerr != nil {
			cause = fmt.Errorf("%w; restoring the old workload also failed: %v", cause, rerr)
		}
		t.a.log.Error("replacement failed", "error", cause)
		if err := t.a.record(ctx, t.a.cfg.Node, sha, cause.Error()); err != nil && recordLater(err) {
			return t.stopped(ctx, err)
		}
	}
	if rerr != nil {
		t.a.log.Warn("cannot restore the old workload yet; the node keeps its slot and tries again", "error", rerr)
		t.hold.Drop()
		return t.ended(t.l.SHA, conclude(t.l, event{end: endRestoreFailed, err: rerr.Error()}))
	}
	t.a.undoing = ""
	var why string
	if cause != nil {
		why = cause.Error()
	}
	return t.undone(ctx, restore, sha, why)
}

// restore brings back what was set aside. If the runtime fails it, the
// next look must carry on with the undo (Agent.undoing), never verify what
// it undoes: noted before anything may end the turn early.
func (t *turn) restore(ctx context.Context, sha string) error {
	uctx, cancel := context.WithTimeout(ctx, t.a.stepTimeout())
	defer cancel()
	err := t.a.cfg.Runtime.Restore(uctx, sha)
	if err != nil {
		t.a.undoing = sha
	}
	return err
}

// undone ends the turn after an undo that counted cause, if not "", as a
// failure of failed: with the node's slot while what it brought back is
// down.
func (t *turn) undone(ctx context.Context, restored bool, failed, cause string) ending {
	rt := t.a.cfg.Runtime
	obs, err := rt.Inspect(ctx)
	if err != nil {
		return t.keep(ctx, conclude(t.l, event{end: endUndoUnread, err: err.Error()}))
	}
	if restored && obs.SHA != "" && t.gs.Spec != nil {
		// The node counts as down until the old workload is healthy again.
		if herr := rt.WaitHealthy(ctx, t.gs.Spec); herr != nil {
			t.a.log.Warn("restored workload is not healthy", "error", herr)
		}
	}
	after := t.l
	after.SHA, after.Leftover, after.Unverified, after.Claimed, after.Undoing = obs.SHA, obs.Leftover, false, false, ""
	after.Healthy, _ = rt.Healthy(ctx)
	t.a.undrain(ctx, drainUndone, after.Healthy, true)
	o := conclude(after, event{end: endUndone, cause: cause, failed: failed})
	if o.Keep {
		return t.keep(ctx, o)
	}
	return t.release(ctx, obs.SHA, o)
}

// undoDown brings back what was set aside on a node whose workload is down
// and whose claim had lapsed, behind the gate, or whose undo this process
// could not finish: counted as a failure of the new workload when one
// runs, and not when the step was cut off before it started one.
func (t *turn) undoDown(ctx context.Context) ending {
	if t.l.Undoing != "" {
		return t.undo(ctx, t.l.Undoing, nil, true)
	}
	var cause error
	if t.l.SHA != "" {
		_, why := t.a.cfg.Runtime.Healthy(ctx)
		cause = fmt.Errorf("the new workload is not healthy: %s", why)
	}
	return t.undo(ctx, t.l.SHA, cause, true)
}

// held fences the end or the undo of a step, with the node's record as it
// is: the slot and the gate, as for every destructive step.
func (t *turn) held(ctx context.Context, name string) error {
	return t.step(ctx, t.l.SHA, name)
}

// carryOn checks the slot alone, whatever the gate says, for the one step
// that may run behind a closed gate: an undo this process began behind a
// passed fence and could not finish (Agent.undoing). It passes no gate, so
// the record names no fenced step.
func (t *turn) carryOn(ctx context.Context, name string) error {
	n := t.a.carried(t.l.SHA, t.l.Desired, inFence)
	return t.check(ctx, n, name, t.hold.Check, "checked the slot")
}

// step fences a destructive step, writing the node's record for sha, which
// names the step: `cancel` and `status` tell from it that the node passed
// a gate.
func (t *turn) step(ctx context.Context, sha, name string) error {
	n := t.a.carried(sha, t.l.Desired, inFence)
	n.Fenced = name
	return t.check(ctx, n, name, t.hold.Fence, "fenced")
}

// check runs check, bounded and retried as Agent.fence does, with n, the
// node's "replacing" record. A check that came back later than fenceFresh
// after it was sent is run again: the step follows at once, and what the
// check proved must still be true then.
func (t *turn) check(ctx context.Context, n coordinator.NodeState, name string, check checkFunc, done string) error {
	op, err := t.a.cfg.Store.NodeOp(t.a.cfg.Group, n)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		sent := time.Now()
		if err := t.a.fence(ctx, t.hold, check, op); err != nil {
			return &fenceError{step: name, err: err}
		}
		took := time.Since(sent)
		if took <= fenceFresh {
			break
		}
		if try == refences {
			return &fenceError{step: name, err: errStaleFence}
		}
		t.a.log.Warn("the fence came back too late to vouch for the step: fencing again", "step", name, "took", took)
	}
	t.fenced = time.Now()
	t.a.log.Info(done, "step", name)
	t.a.pub.published(ctx, n)
	return nil
}

// stopped ends a turn cut off by its fence or a fault of the node's: the
// node keeps its slot and looks again soon.
func (t *turn) stopped(ctx context.Context, err error) ending {
	t.a.log.Info("step stopped; the node keeps its slot and looks again", "reason", err)
	if errors.Is(err, lockstep.ErrSessionLost) {
		t.a.closeSession()
	}
	if t.stopping != nil && t.stopping.Err() != nil {
		// No next look will resolve it: leave the node with its old
		// workload, still under its claim, which keeps its slot, if the
		// gate lets the undo through.
		if obs, ierr := t.a.cfg.Runtime.Inspect(ctx); ierr == nil && obs.Leftover && t.held(ctx, "undo") == nil {
			uctx, cancel := context.WithTimeout(ctx, t.a.stepTimeout())
			if rerr := t.a.cfg.Runtime.Restore(uctx, obs.SHA); rerr != nil {
				t.a.log.Warn("stopping with the step cut off; cannot restore the old workload", "error", rerr)
			}
			cancel()
		}
	}
	t.hold.Drop()
	return t.ended(t.l.SHA, conclude(t.l, event{end: endStopped, err: err.Error()}))
}

// keep ends the turn holding the node's slot, which its next look
// reclaims, with o's record of what runs now.
func (t *turn) keep(ctx context.Context, o outcome) ending {
	t.hold.Drop()
	obs, _ := t.a.cfg.Runtime.Inspect(ctx)
	return t.ended(obs.SHA, o)
}

// ended is the turn's end o, with the node's record for what runs, sha.
func (t *turn) ended(sha string, o outcome) ending {
	return ending{result: o.Result, behind: o.Behind, atClock: o.AtClock, n: t.a.pub.state(sha, t.l.Desired, o.State, o.Reason)}
}

// release gives the slot back with o's record of sha, in the same
// transaction, on a fresh bounded context. If it cannot, the claim stays
// and the next look, soon, reclaims and releases it: a release is never
// given up while the agent lives.
func (t *turn) release(ctx context.Context, sha string, o outcome) ending {
	if t.a.pub.drain() != nil {
		// Lifted before the record the release writes is built: a node
		// that holds no slot keeps no drain while its workload is healthy.
		healthy, _ := t.a.cfg.Runtime.Healthy(ctx)
		t.a.undrain(ctx, drainLook, healthy, false)
		if healthy && t.a.pub.drain() != nil {
			// The lift failed: the node is still out of service, so it
			// keeps its slot, counted against K, until a look lifts it.
			t.a.log.Warn("the drain is not lifted; the node keeps its slot until it is")
			return t.keep(ctx, o)
		}
	}
	e := t.ended(sha, o)
	if t.stopping != nil && t.stopping.Err() != nil {
		// The agent stops (a reboot, say): the release frees the slot and
		// marks the node stopped in one write, so it counts as down
		// (Store.Down) before the next node can be granted.
		now := wallclock.Now().UTC()
		e.n.Stopped = &now
	}
	rctx, cancel := context.WithTimeout(ctx, t.a.cfg.settleTimeout)
	defer cancel()
	err := t.hold.Release(rctx, t.a.nodeOps(e.n)...)
	if err != nil && e.n.Stopped != nil && e.n.StopIndex && strings.Contains(strings.ToLower(err.Error()), "permission denied") {
		// The token may not write the stop index (an ACL policy from
		// before it): the mark goes alone, as before, and readers of
		// records that lack StopIndex read every record.
		t.a.pub.indexDenied(err)
		e.n.StopIndex = false
		err = t.hold.Release(rctx, t.a.nodeOps(e.n)...)
	}
	if err != nil {
		t.a.log.Warn("cannot release the slot yet; the next look tries again", "error", err)
		t.hold.Drop()
		e.result = resultAborted
		return e
	}
	t.a.pub.published(ctx, e.n)
	return e
}
