package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

// reconcile takes one look at the node against gs and does what the gate
// allows. It returns how soon to look again without a change to desired,
// or 0 to wait for one.
func (a *Agent) reconcile(ctx context.Context, gs *coordinator.GroupState) time.Duration {
	rt := a.cfg.Runtime
	desired := ""
	if gs.Desired != nil {
		desired = gs.Desired.SHA
	}
	a.pub.sync(gs)
	obs, err := rt.Inspect(ctx)
	if err == nil && gs.DesiredUnreadable() {
		// Not even an interrupted replacement is resolved against a record
		// nobody can read: Recover would pick a side on garbage.
		a.pub.set(ctx, a.pub.state(obs.SHA, "", coordinator.StateWaiting, "the desired record is unreadable; touching nothing until it is fixed"))
		return 0
	}
	if err == nil && obs.Leftover {
		if err = rt.Recover(ctx, desired); err == nil {
			obs, err = rt.Inspect(ctx)
		}
	}
	if err != nil {
		a.pub.set(ctx, a.pub.state(obs.SHA, desired, coordinator.StateUnknown, err.Error()))
		return jitter(DefaultRetry)
	}
	a.cfg.Metrics.Converged(desired != "" && obs.SHA == desired)
	switch {
	case desired == "":
		a.log.Info("nothing committed for the group yet")
		return 0
	case obs.SHA == desired && !a.midReplacement(gs, desired):
		n := a.pub.state(obs.SHA, desired, coordinator.StateConverged, "")
		a.pub.set(ctx, n)
		a.idleSession(ctx, n)
		return 0
	case obs.SHA == desired:
		// Killed while verifying a first deploy, say: nothing was set aside
		// to recover, and a workload that was never seen healthy must not
		// count as converged, or a bad release would roll on.
		a.log.Info("the workload runs the desired SHA but was never verified; verifying it under a slot")
	}
	if state, why := a.blocked(gs); state != "" {
		n := a.pub.state(obs.SHA, desired, state, why)
		a.pub.set(ctx, n)
		a.idleSession(ctx, n) // nothing to contend for until desired moves
		return 0
	}
	if obs.SHA != desired { // a workload to verify needs nothing prepared
		if err := rt.Prepare(ctx, gs.Spec, desired); err != nil {
			a.pub.set(ctx, a.pub.state(obs.SHA, desired, coordinator.StateFailed, "prepare: "+err.Error()))
			return jitter(DefaultRetry)
		}
	}
	return a.replace(ctx, gs, obs)
}

// midReplacement says this node's own record shows it heading for sha and
// never converged on it: an agent stopped after it started the new workload
// and before it saw it healthy (or before its release wrote converged), or
// a verification that failed or was stopped. A converged record, one for
// another SHA, or none is no evidence against the workload, so the node
// counts as converged as before.
func (a *Agent) midReplacement(gs *coordinator.GroupState, sha string) bool {
	for _, n := range gs.Nodes {
		if n.Node == a.cfg.Node {
			return n.Desired == sha && n.State != coordinator.StateConverged
		}
	}
	return false
}

// blocked says why this node must not move to the desired SHA now, as a
// node state and a reason, or "" when it may contend for a slot.
func (a *Agent) blocked(gs *coordinator.GroupState) (string, string) {
	v := gs.Gate()
	switch {
	case gs.Cancel != nil:
		return coordinator.StateCancelled, v.Reason
	case gs.Pause != nil || (!v.Open && gs.Spec != nil && len(gs.Failures) > 0):
		return coordinator.StatePaused, v.Reason
	case !v.Open:
		return coordinator.StateWaiting, v.Reason
	}
	for _, f := range gs.Failures {
		if f.Node == a.cfg.Node {
			return coordinator.StateFailed, f.Error
		}
	}
	if err := a.cfg.Allow.Check(gs.Spec); err != nil {
		return coordinator.StateFailed, err.Error()
	}
	return "", ""
}

// replace waits for a slot and replaces the workload under it.
func (a *Agent) replace(ctx context.Context, gs *coordinator.GroupState, obs Observed) time.Duration {
	s, err := a.session(ctx, a.pub.state(obs.SHA, gs.Desired.SHA, coordinator.StateWaiting, ""))
	if err != nil {
		a.cfg.Metrics.ConsulError()
		a.log.Warn("cannot create a session", "error", err)
		return jitter(DefaultRetry)
	}
	m, err := lockstep.New(a.c, s, lockstep.Options{Prefix: a.keys.Slot(), Name: a.cfg.Node, Logger: a.log.Named("lockstep")})
	if err != nil {
		return jitter(DefaultRetry)
	}
	start := time.Now()
	hold, claim, err := a.acquire(ctx, m, gs, obs)
	a.cfg.Metrics.SlotWait(time.Since(start))
	switch {
	case errors.Is(err, lockstep.ErrSuperseded) || errors.Is(err, lockstep.ErrCancelled) || ctx.Err() != nil:
		return 0
	case errors.Is(err, lockstep.ErrSessionLost):
		a.closeSession()
		return time.Second
	case err != nil:
		a.log.Warn("cannot acquire a slot", "error", err)
		return jitter(DefaultRetry)
	}
	held := time.Now()
	a.pub.published(ctx, claim)
	// A signal now must not leave the workload half replaced: the step runs
	// to its end (or its undoing) on a context of its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), gs.Spec.Update.HealthyDeadline.Std()+shutdownGrace)
	defer cancel()
	a.log.Info("slot acquired", "waited", held.Sub(start).Round(time.Millisecond))
	result, done := a.replaceHeld(rctx, hold, gs, obs, held)
	a.release(rctx, hold, done)
	a.cfg.Metrics.SlotHold(time.Since(held))
	a.cfg.Metrics.Replacement(result)
	if result == "aborted" {
		// Stopped by its fence: if the gate closed, desired moved and the
		// next look waits on it; if Consul was out of reach, look again soon.
		return jitter(2 * time.Second)
	}
	// Replaced or failed: nothing to contend for until desired moves, which
	// may not be before the next resync, so a session that costs passes
	// goes now.
	a.idleSession(ctx, a.pub.current())
	return 0
}

// acquire waits for a slot. The node's "waiting" record goes in with its
// place in line, and its "replacing" record with the grant, which it
// returns: two writes that need no round trip of their own.
func (a *Agent) acquire(ctx context.Context, m *lockstep.Semaphore, gs *coordinator.GroupState, obs Observed) (*lockstep.Hold, coordinator.NodeState, error) {
	sha := gs.Desired.SHA
	var w lockstep.Writes
	if waiting := a.pub.state(obs.SHA, sha, coordinator.StateWaiting, ""); a.pub.differs(waiting) {
		w.Join = a.nodeOps(waiting)
		// Counted as written now: if joining fails, the next look finds
		// the record unlike this (publisher.sync) and writes it again.
		a.pub.published(ctx, waiting)
	}
	var claim coordinator.NodeState
	w.Grant = func() api.TxnOps {
		claim = a.pub.state(obs.SHA, sha, coordinator.StateReplacing, "")
		return a.nodeOps(claim)
	}
	hold, err := m.AcquireWith(ctx, gs.LockGate(a.keys), w)
	return hold, claim, err
}

// nodeOps is the op that writes n, for a transaction of lockstep's.
func (a *Agent) nodeOps(n coordinator.NodeState) api.TxnOps {
	op, err := a.cfg.Store.NodeOp(a.cfg.Group, n)
	if err != nil {
		a.log.Error("cannot encode the node record", "error", err)
		return nil
	}
	return api.TxnOps{op}
}

// release gives the slot back, writing done (the node's converged record)
// in the same transaction: one write fewer between two nodes' turns.
func (a *Agent) release(ctx context.Context, hold *lockstep.Hold, done *coordinator.NodeState) {
	var ops api.TxnOps
	if done != nil {
		ops = a.nodeOps(*done)
	}
	if err := hold.Release(ctx, ops...); err != nil {
		a.log.Warn("cannot release the slot; closing the session frees it", "error", err)
		a.closeSession()
		if done != nil {
			a.pub.set(ctx, *done)
		}
		return
	}
	if done != nil {
		a.pub.published(ctx, *done)
	}
}

// grantFence is how soon after the grant the first destructive step may
// count the grant as its fence: the grant checked the gate and the session
// and wrote the step's record, so a fence of its own at once would check
// the same again and cost a round trip between two nodes' turns.
const grantFence = time.Second

// replaceHeld runs the replacement with a fence before each destructive
// step, verifies health, and finishes or restores. On success it returns
// the converged record for the release to write.
func (a *Agent) replaceHeld(ctx context.Context, hold *lockstep.Hold, gs *coordinator.GroupState, obs Observed, granted time.Time) (string, *coordinator.NodeState) {
	rt, spec, sha := a.cfg.Runtime, gs.Spec, gs.Desired.SHA
	first := true
	step := func(ctx context.Context, name string) error {
		byGrant := first && time.Since(granted) < grantFence
		first = false
		if byGrant {
			a.log.Info("fenced by the grant", "step", name)
			return nil
		}
		n := a.pub.state(obs.SHA, sha, coordinator.StateReplacing, "")
		op, err := a.cfg.Store.NodeOp(a.cfg.Group, n)
		if err != nil {
			return err
		}
		if err := a.fence(ctx, hold, op); err != nil {
			return &fenceError{step: name, err: err}
		}
		a.log.Info("fenced", "step", name)
		a.pub.published(ctx, n)
		return nil
	}
	var err error
	verifyOnly := obs.SHA == sha
	if verifyOnly {
		err = step(ctx, "verify")
	} else {
		err = rt.Replace(ctx, spec, sha, step)
	}
	if err == nil {
		err = a.verify(ctx, spec, sha)
	}
	if err == nil {
		if ferr := rt.Finish(ctx); ferr != nil {
			a.log.Warn("new workload is healthy but the old one was not removed; the next start removes it", "error", ferr)
		}
		n := a.pub.state(sha, sha, coordinator.StateConverged, "")
		return "success", &n
	}
	return a.failed(ctx, gs, obs, err, verifyOnly), nil
}

// verifyRecordAfter is how long a health check runs before the node's
// "verifying" record is written. A check that passes sooner goes straight
// from "replacing" to "converged": the record would be true for a moment
// only, and its write would sit between this node's grant and the next
// node's. Either record tells a restarted agent to verify before it counts
// the node as converged.
const verifyRecordAfter = time.Second

// verify waits for the new workload to be healthy, writing the "verifying"
// record once that takes verifyRecordAfter. That write is done before
// verify returns, so it cannot land after the release's "converged".
func (a *Agent) verify(ctx context.Context, spec *hashspec.Spec, sha string) error {
	wrote := make(chan struct{})
	t := time.AfterFunc(verifyRecordAfter, func() {
		defer close(wrote)
		a.pub.set(ctx, a.pub.state(sha, sha, coordinator.StateVerifying, ""))
	})
	err := a.cfg.Runtime.WaitHealthy(ctx, spec)
	if !t.Stop() {
		<-wrote
	}
	return err
}

// fence runs hold.Fence, retrying a failure to reach Consul (a leader
// election, say) for up to two thirds of the session TTL. Within that time
// a success proves the slot is still ours; past it, a partitioned holder
// may already have lost its slot to the next node, and it must undo its
// step at once rather than keep its node down beside that one. A closed
// gate or a lost session is final at once.
func (a *Agent) fence(ctx context.Context, hold *lockstep.Hold, op *api.TxnOp) error {
	deadline := time.Now().Add(a.cfg.SessionTTL * 2 / 3)
	for wait := 250 * time.Millisecond; ; wait *= 2 {
		// Bound each try too: a Consul client cut off from its servers holds
		// a request for its RPC hold timeout (7s) before it answers.
		actx, cancel := context.WithDeadline(ctx, deadline)
		_, err := hold.Fence(actx, op)
		cancel()
		if err == nil || !lockstep.IsTransient(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		a.log.Warn("fence could not reach consul; retrying", "in", wait, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-hold.Lost():
			return err
		case <-time.After(wait):
		}
	}
}

// Errors a runtime wraps for a replacement that failed through no fault of
// the release: failed does not record them, and the next look tries again.
var (
	// errInterrupted means the runtime found what an interrupted
	// replacement left: an agent killed in the middle of a call that the
	// runtime finished after the restarted agent had looked. The next look
	// recovers it.
	errInterrupted = errors.New("agent: an interrupted replacement must be recovered first")
	// errUnreachable means the runtime could not reach what runs the
	// workload (the Docker daemon), or saw it stop the workload as it went
	// away.
	errUnreachable = errors.New("agent: runtime unreachable")
)

// failed restores the old workload and, unless the replacement was merely
// stopped by its fence or by a fault of the node rather than of the
// release, records the failure and applies failure_action.
//
// A workload that was only being verified is left in place: there is
// nothing older to restore, and removing it would leave the node with
// nothing at all.
func (a *Agent) failed(ctx context.Context, gs *coordinator.GroupState, obs Observed, err error, verifyOnly bool) string {
	sha := gs.Desired.SHA
	if verifyOnly {
		a.log.Warn("the workload in place failed its verification; leaving it, as there is nothing to restore", "error", err)
	} else if rerr := a.cfg.Runtime.Restore(ctx, sha); rerr != nil {
		err = fmt.Errorf("%w; restoring the old workload also failed: %v", err, rerr)
	} else if obs.SHA != "" {
		// The node counts as down until the old workload is healthy again,
		// so the slot is kept until then (or until healthy_deadline).
		if herr := a.cfg.Runtime.WaitHealthy(ctx, gs.Spec); herr != nil {
			a.log.Warn("restored workload is not healthy", "error", herr)
		}
	}
	var fe *fenceError
	if errors.As(err, &fe) {
		a.log.Info("replacement stopped by its fence", "step", fe.step, "reason", fe.err)
		a.pub.set(ctx, a.pub.state(obs.SHA, sha, coordinator.StateWaiting, err.Error()))
		return "aborted"
	}
	if errors.Is(err, errInterrupted) || errors.Is(err, errUnreachable) {
		a.log.Warn("replacement stopped by a fault of the node, not of the release; trying again", "error", err)
		a.pub.set(ctx, a.pub.state(obs.SHA, sha, coordinator.StateWaiting, err.Error()))
		return "aborted"
	}
	a.log.Error("replacement failed", "error", err, "restored", !verifyOnly)
	action, rerr := a.recordFailure(ctx, sha, err.Error())
	if rerr != nil {
		a.log.Error("cannot record the failure", "error", rerr)
	}
	a.log.Info("failure recorded", "action", actionName(action))
	a.pub.set(ctx, a.pub.state(obs.SHA, sha, coordinator.StateFailed, err.Error()))
	return "failed"
}

type fenceError struct {
	step string
	err  error
}

func (e *fenceError) Error() string { return fmt.Sprintf("fence before %q: %v", e.step, e.err) }
func (e *fenceError) Unwrap() error { return e.err }

func actionName(a coordinator.Action) string {
	switch a {
	case coordinator.ActionPause:
		return "pause"
	case coordinator.ActionRollback:
		return "rollback"
	}
	return "none"
}
