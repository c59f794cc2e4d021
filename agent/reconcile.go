package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/lockstep"
)

// report is what one look comes to: the node's record to publish, if
// any, and how soon to look again.
type report struct {
	n *coordinator.NodeState
	// wait is how soon to look again without a change to desired, 0 to
	// wait for one.
	wait time.Duration
	// idle says there is nothing to contend for until desired moves: the
	// session goes idle (idleSession) once n is published.
	idle bool
	// turn says n is how a turn under the slot ended: it is written even
	// as the agent stops (within the write's own bound), as the turn
	// resolved its step on a context of its own, and no next look may come
	// to say what it left.
	turn bool
}

// reconcile takes one look at the node against gs and publishes what came
// of it, once. It returns how soon to look again without a change to
// desired, or 0 to wait for one.
func (a *Agent) reconcile(ctx context.Context, gs *coordinator.GroupState) time.Duration {
	r := a.lookOnce(ctx, gs)
	if r.n != nil {
		pctx := ctx
		if r.turn {
			pctx = context.WithoutCancel(ctx)
		}
		a.pub.set(pctx, *r.n)
		if !r.idle {
			return r.wait
		}
		// Nothing to contend for until desired moves, but a session that
		// could not be made is tried again before then.
		if again := a.idleSession(ctx, *r.n); again > 0 && (r.wait == 0 || r.wait > again) {
			r.wait = again
		}
	}
	return r.wait
}

// lookOnce observes the node, decides, and acts on what decide makes of
// it.
func (a *Agent) lookOnce(ctx context.Context, gs *coordinator.GroupState) report {
	a.learnConsulNode(ctx)
	a.learnDomain(ctx, gs)
	a.pub.sync(gs)
	if err := a.recordPending(ctx); err != nil {
		return report{wait: jitter(retryPause)}
	}
	obs, err := a.cfg.Runtime.Inspect(ctx)
	if err != nil {
		l := Look{SHA: obs.SHA}
		if gs.Desired != nil {
			l.Desired = gs.Desired.SHA
		}
		return a.reportOf(l, conclude(l, event{end: endUnread, err: err.Error()}), jitter(retryPause))
	}
	a.pub.observe(obs)
	l := a.look(ctx, gs, obs)
	a.undrain(ctx, drainLook, l.Healthy, l.Claimed)
	d := decide(l)
	a.cfg.Metrics.Converged(l.Desired != "" && obs.SHA == l.Desired && d.State == coordinator.StateConverged)
	switch {
	case d.Plan == PlanIdle && d.State == "":
		a.log.Info("nothing committed for the group yet")
		return report{}
	case d.Plan == PlanIdle:
		r := a.reportOf(l, outcome{State: d.State, Reason: d.Reason}, 0)
		r.wait, r.idle = jitterOrNot(d.Again), true
		if d.AtClock {
			r.wait = clockWait(d.Again)
		}
		return r
	case d.Prepare:
		if err := a.cfg.Runtime.Prepare(ctx, gs.Spec, l.Desired); err != nil {
			return a.reportOf(l, conclude(l, event{end: endPrepareFailed, err: err.Error()}), jitter(retryPause))
		}
	}
	return a.act(ctx, gs, l, d)
}

// clockWait is how long a node waits for a change of the gate by the
// clock, d away: until after it, by a spread that grows with the wait, at
// most 30 s: one look each, not a fleet halving its way to it.
func clockWait(d time.Duration) time.Duration {
	return d + rand.N(min(d/10, 30*time.Second)+1)
}

// reportOf is the report of a look at l that ends in o, before a slot.
func (a *Agent) reportOf(l Look, o outcome, wait time.Duration) report {
	n := a.pub.state(l.SHA, l.Desired, o.State, o.Reason)
	return report{n: &n, wait: wait}
}

// jitterOrNot is jitter(d), or 0 for 0: to wait for desired to move.
func jitterOrNot(d time.Duration) time.Duration {
	if d == 0 {
		return 0
	}
	return jitter(d)
}

// look gathers what decide needs from gs and the runtime.
func (a *Agent) look(ctx context.Context, gs *coordinator.GroupState, obs Observed) Look {
	now := wallclock.Now()
	v := coordinator.Evaluate(coordinator.GateInput{Group: gs, Now: now, Mono: time.Now()})
	a.pub.sawGate(v, gs, now)
	l := Look{Unreadable: gs.DesiredUnreadable(), SHA: obs.SHA, Leftover: obs.Leftover, Open: v.Open, Reason: v.Reason,
		Hold: v.Hold}
	if !v.Recheck.IsZero() {
		// At least a millisecond: a look right at the change waits for it.
		l.Recheck = max(v.Recheck.Sub(now), time.Millisecond)
		l.recheckAt = time.Now().Add(l.Recheck)
	}
	if gs.Desired != nil {
		l.Desired = gs.Desired.SHA
	}
	l.ClosedState, l.Opens = v.Node, v.Opens
	if l.stepping() {
		l.Refused = a.refused(gs)
	}
	// Against desired only: a node left on a SHA that is no longer desired
	// is behind, and replaced, not verified again.
	own := false
	for _, n := range gs.Nodes {
		if n.Node == a.cfg.Node {
			own = true
			l.Unverified = obs.SHA != "" && obs.SHA == l.Desired && n.Desired == obs.SHA && !n.State.Verified()
		}
	}
	if gs.Holders != nil {
		_, l.Claimed = gs.Holders.ClaimOf(a.cfg.Node)
	}
	if !own && obs.SHA != "" && obs.SHA == l.Desired && (l.Claimed || l.Refused != "") {
		// No record of its own (`node rm --force` removed it mid-step, say)
		// and a step of its own unended (its claim: only a release, which
		// writes the record, ends one) or failed: nothing says the node
		// converged on what runs, so it is verified before it counts.
		l.Unverified = true
	}
	if l.Claimed {
		l.Undoing = a.undoing
	}
	if l.Claimed || l.Leftover || obs.SHA != "" {
		l.readHealth(ctx, a.health)
	}
	return l
}

// readHealth reads the workload's health into l.
func (l *Look) readHealth(ctx context.Context, j HealthJudge) {
	var h Health
	h, l.Why = j.Health(ctx)
	l.Healthy, l.Down = h == HealthUp, h == HealthDown
}

// refused says why this node will not move to the desired SHA although
// the gate is open, or "".
func (a *Agent) refused(gs *coordinator.GroupState) string {
	for _, f := range gs.Failures {
		if f.Node == a.cfg.Node {
			return f.Error
		}
	}
	if err := a.cfg.Allow.Check(gs.Spec); err != nil {
		return err.Error()
	}
	return ""
}

// act takes this node's slot, by reclaiming it or by waiting in line, and
// does under it what underSlot says.
func (a *Agent) act(ctx context.Context, gs *coordinator.GroupState, l Look, d Decision) report {
	m, g, ok := a.contend(ctx, gs, l)
	if !ok {
		return report{wait: jitter(retryPause)}
	}
	begin := time.Now()
	var hold *lockstep.Hold
	var err error
	if d.Plan == PlanReclaim || d.Plan == PlanClaimDown {
		hold, err = a.reclaim(ctx, m, g, gs, &l, d.Plan)
	} else {
		hold, err = a.acquire(ctx, m, g, gs, l)
	}
	waited := time.Since(begin)
	a.cfg.Metrics.SlotWait(waited)
	if retry, done := a.notHeld(ctx, m, err); done {
		return report{wait: retry}
	}
	held := time.Now()
	a.log.Info("slot held", "reclaimed", d.Plan != PlanContend, "waited", waited.Round(time.Millisecond))
	step := d.Step
	if d.Plan != PlanContend {
		step = underSlot(l) // of the look that the reclaim completed
	}
	t := &turn{a: a, hold: hold, gs: gs, l: l, prepared: d.Plan == PlanContend}
	e := t.run(ctx, step)
	a.cfg.Metrics.SlotHold(time.Since(held))
	a.cfg.Metrics.Replacement(string(e.result))
	wait, idle := again(e.result, l.stepping(), e.behind)
	wait = jitterOrNot(wait)
	if e.atClock && wait == 0 {
		// Behind under a gate the clock may open: looked at then, as an
		// idle look does, from the look's clock, not after the turn.
		wait = clockWait(max(time.Until(l.recheckAt), time.Millisecond))
	}
	if e.retry > 0 {
		wait = e.retry // a backoff's, jittered already
	}
	return report{n: &e.n, wait: wait, idle: idle, turn: true}
}

// contend readies this node to take its slot: its session, its semaphore,
// and the gate a grant checks. ok is false, logged, when it cannot.
func (a *Agent) contend(ctx context.Context, gs *coordinator.GroupState, l Look) (*lockstep.Semaphore, lockstep.Gate, bool) {
	if gs.DesiredIndex() == 0 {
		return nil, lockstep.Gate{}, false // a claim but no desired key: nothing to fence on
	}
	s, err := a.session(ctx, a.carried(l.SHA, l.Desired, inLineJoin))
	if err != nil {
		a.cfg.Metrics.ConsulError()
		a.log.Warn("cannot create a session", "error", err)
		return nil, lockstep.Gate{}, false
	}
	opts := lockstep.Options{Prefix: a.keys.Slot(), Name: a.cfg.Node, Logger: a.log.Named("lockstep"),
		Unavailable: func(ctx context.Context) ([]string, error) { return a.cfg.Store.Unavailable(ctx, a.cfg.Group) }}
	if !a.withDomain(ctx, gs, &opts) {
		return nil, lockstep.Gate{}, false
	}
	m, err := a.cfg.Store.NewSemaphore(s, opts)
	if err != nil {
		a.log.Error("cannot contend for a slot", "error", err)
		return nil, lockstep.Gate{}, false
	}
	g := gs.LockGate(a.keys)
	g.Lease = a.lease(gs.Spec)
	return m, g, true
}

// withDomain sets this node's topology domain (update.max_parallel_per)
// in opts, from its Consul agent's node meta, and how to learn the
// others' (from the catalog). ok is false, logged, when the domain cannot
// be told: a node that cannot say where it is must not take a slot that
// the bound per domain might refuse it; it tries again at its next look.
func (a *Agent) withDomain(ctx context.Context, gs *coordinator.GroupState, opts *lockstep.Options) bool {
	if gs.Spec == nil || gs.Spec.Update.MaxParallelPer == nil {
		return true
	}
	key := gs.Spec.Update.MaxParallelPer.Key
	d, err := a.cfg.Store.LocalDomain(ctx, key)
	if err != nil {
		a.cfg.Metrics.ConsulError()
		a.log.Warn("cannot read this node's Consul node meta for update.max_parallel_per", "error", err)
		return false
	}
	opts.Domain = d
	a.pub.inDomain(d)
	opts.Domains = func(ctx context.Context) (map[string]string, error) {
		return a.cfg.Store.Domains(ctx, a.cfg.Group, key)
	}
	return true
}

// reclaim takes this node's slot back, after claiming it first when its
// workload is down (PlanClaimDown), and notes in l what it found.
func (a *Agent) reclaim(ctx context.Context, m *lockstep.Semaphore, g lockstep.Gate, gs *coordinator.GroupState, l *Look, plan Plan) (*lockstep.Hold, error) {
	if plan == PlanClaimDown {
		if err := m.ClaimDown(ctx, g, coordinator.ClaimNote(gs.Desired)); err != nil {
			return nil, err
		}
		a.log.Info("the workload is down: claimed the node's slot, to be replaced ahead of the line")
	}
	recovering := a.carried(l.SHA, l.Desired, inReclaim)
	hold, err := m.Reclaim(ctx, g, coordinator.ClaimNote(gs.Desired), a.nodeOps(recovering)...)
	if err != nil {
		return nil, err
	}
	// Written with the claim: a turn that then touches nothing must write
	// its record again, even the one its last look wrote.
	a.pub.published(ctx, recovering)
	l.Lapsed, l.Reclaimed = hold.Lapsed(), true
	if plan == PlanClaimDown {
		// Read again right before the step: a workload healthy again
		// releases (underSlot) and goes back in line, where a grant
		// counts every node down now.
		l.readHealth(ctx, a.health)
	}
	return hold, nil
}

// notHeld handles a failure to take the slot; done is false when there is
// none.
func (a *Agent) notHeld(ctx context.Context, m *lockstep.Semaphore, err error) (time.Duration, bool) {
	var lost *lockstep.LostError
	switch {
	case err == nil:
		return 0, false
	case errors.As(err, &lost):
		if a.reportLost(ctx, m, lost) {
			return time.Millisecond, true // back in line at once
		}
		return jitter(retryPause), true
	case errors.Is(err, errRecheck) || errors.Is(err, lockstep.ErrGateStale):
		return time.Millisecond, true // to look at the gate as it is now
	case errors.Is(err, errWentDown):
		return time.Millisecond, true // to claim its slot at once
	case errors.Is(err, lockstep.ErrNoClaim):
		// The claim went between the look and the reclaim (released,
		// or marked lost): the next look contends instead.
		return jitter(2 * time.Second), true
	case errors.Is(err, lockstep.ErrSuperseded) || errors.Is(err, lockstep.ErrCancelled) || ctx.Err() != nil:
		return 0, true
	case errors.Is(err, lockstep.ErrSessionLost):
		a.closeSession()
		return time.Second, true
	}
	a.log.Warn("cannot take a slot", "error", err)
	return jitter(retryPause), true
}

// acquire waits for a slot. The node's "waiting" record goes in with its
// place in line, and its "replacing" record with the grant: two writes
// that need no round trip of their own.
func (a *Agent) acquire(ctx context.Context, m *lockstep.Semaphore, g lockstep.Gate, gs *coordinator.GroupState, l Look) (*lockstep.Hold, error) {
	left := time.Until(l.recheckAt)
	if l.Recheck > 0 && left <= 0 {
		return nil, errRecheck // the gate's clock moved on while the node prepared
	}
	sha := gs.Desired.SHA
	w := lockstep.Writes{Note: coordinator.ClaimNote(gs.Desired)}
	if waiting := a.carried(l.SHA, sha, inLineJoin); a.pub.differs(waiting) {
		w.Join = a.nodeOps(waiting)
		// Counted as written now: if joining fails, the next look finds
		// the record unlike this (publisher.sync) and writes it again.
		a.pub.published(ctx, waiting)
	}
	var claim coordinator.NodeState
	var healthIndex uint64 // of the health read right before the grant
	w.Grant = func() api.TxnOps {
		claim = a.carried(l.SHA, sha, inGrant)
		claim.HealthIndex = healthIndex
		return a.nodeOps(claim)
	}
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if l.SHA != "" {
		go a.watchDown(wctx, stop)
	}
	if l.Recheck > 0 {
		defer time.AfterFunc(left, func() { stop(errRecheck) }).Stop()
	}
	if gs.Polls() {
		go a.watchPolled(wctx, stop, gs)
	}
	if gs.Spec != nil && gs.Spec.Update.Blocks() {
		// The watch leaves the line within a tick; this holds the grant
		// itself to the health as read one round trip before it.
		w.Check = func(ctx context.Context) error {
			h, closed := a.blockClosed(ctx, gs)
			if closed != "" {
				a.log.Info("not taking the slot: the gate closed right before the grant", "reason", closed)
				return errRecheck
			}
			healthIndex = h.Index
			return nil
		}
	}
	if gs.Spec != nil && gs.Spec.Update.MaxParallel.IsPercent() {
		go a.watchMembers(wctx, stop, gs.NodeCount())
	}
	hold, err := m.AcquireWith(wctx, g, w)
	if err == nil {
		a.pub.published(ctx, claim)
	} else if cause := context.Cause(wctx); ctx.Err() == nil && (errors.Is(cause, errWentDown) || errors.Is(cause, errRecheck)) {
		err = cause
	}
	return hold, err
}

// carried is the node's record of sha that c carries (decide.go's carried).
func (a *Agent) carried(sha, desired string, c carrier) coordinator.NodeState {
	state, reason := carried(c)
	return a.pub.state(sha, desired, state, reason)
}

// nodeOps are the ops that write n, for a transaction of lockstep's: its
// record, and its stop mark's index when it carries one (Store.NodeOps).
func (a *Agent) nodeOps(n coordinator.NodeState) api.TxnOps {
	ops, err := a.cfg.Store.NodeOps(a.cfg.Group, n)
	if err != nil {
		a.log.Error("cannot encode the node record", "error", err)
		return nil
	}
	return ops
}

// leaseGrace is what a node's claim gets beyond the bounds of what one
// hold runs (holdBound) to undo, record and release.
const leaseGrace = 30 * time.Second

// ExecLeaseSlack is what an exec node's claim lease adds to its hook
// timeout and twice healthy_deadline when its spec drains nothing: the
// bound of its Prepare and the lease's grace (Agent.lease). The run
// command's help states the lease with it.
const ExecLeaseSlack = execPrepareTimeout + leaseGrace

// lease is how long a waiter must see a node's claim orphaned (its
// session gone) before it reports the node lost: as long as everything
// one hold runs could last (holdBound), since a holder cut off from Consul
// may not know its session is gone and goes on until a fence stops it.
// A holder that is alive and reaches Consul loses nothing by it: it
// reclaims its claim, which renews it, as soon as it sees its session go.
func (a *Agent) lease(spec *hashspec.Spec) time.Duration {
	return addBounds(a.holdBound(spec), a.cfg.leaseGrace)
}

// stepTimeout bounds one destructive call of the runtime.
func (a *Agent) stepTimeout() time.Duration {
	if b, ok := a.cfg.Runtime.(interface{ StepTimeout() time.Duration }); ok {
		return b.StepTimeout()
	}
	return DefaultStepTimeout
}

// reportLost marks another node's claim lost, as that node never came back
// from its step, and records, in the same transaction, a failure of that
// node's for the SHA, and the commit of it, its claim was for
// (coordinator.LostOps: a step of an earlier commit of a SHA desired again
// counts nothing). One transaction, so that the failure is counted if and
// only if the claim is marked: never missed, never counted twice, and
// never for a node that reclaimed its slot after it was judged lost. It
// says whether the report is done (marked, or nothing left to mark): if
// not, the caller waits before it tries again.
func (a *Agent) reportLost(ctx context.Context, m *lockstep.Semaphore, lost *lockstep.LostError) bool {
	c := lost.Claim
	msg := lost.Name + " lost while replacing; not back within " + c.Until.Sub(c.Since).Round(time.Second).String()
	a.log.Warn("a node never came back from its step", "lost", lost.Name, "since", c.Since)
	var failure api.TxnOps
	action := coordinator.ActionNone
	marked, err := m.MarkLostWith(ctx, lost.Name, c, func(ctx context.Context) (api.TxnOps, error) {
		if a.cfg.beforeLostMark != nil {
			a.cfg.beforeLostMark()
		}
		if c.Note == "" {
			return nil, nil
		}
		var err error
		failure, action, err = a.cfg.Store.LostOps(ctx, a.cfg.Group, a.cfg.Node, lost.Name, c.Note, c.Since, msg)
		return failure, err
	})
	if err != nil {
		a.log.Warn("cannot mark the lost node's claim, nor record its failure", "error", err)
		return false
	}
	if marked && len(failure) > 0 {
		a.cfg.Store.PruneNodeEvents(ctx, a.cfg.Group, a.cfg.Node)
		a.log.Info("failure recorded", "node", lost.Name, "action", actionName(action))
	}
	return true
}
