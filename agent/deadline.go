package agent

import (
	"context"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/wallclock"
)

// The progress deadline (update.progress_deadline) has no owner: the agent
// of every node that is behind measures it, on its own monotonic clock,
// and the first whose count passes it writes the commit's deadline record
// (coordinator.Store.FireDeadline), which Consul lets exactly one write.
// A restart of the agent starts its count again: it fires later, never
// early.

// progressLook is what one look of the deadline's watcher saw.
type progressLook struct {
	// Commit names the desired commit (coordinator.ClaimNote), "" when
	// nothing is committed.
	Commit string
	// Deadline is the desired spec's progress_deadline, 0 for none.
	Deadline time.Duration
	// Fired says the commit's deadline record exists: it passed already.
	Fired bool
	// Behind says this node has not converged on the desired SHA.
	Behind bool
	// Open is the gate as this node sees it; a hold (a window, a check)
	// is closed.
	Open bool
	// Listed says the nodes' records were read at this look, and
	// Converged are those that say they converged on the desired SHA. A
	// look without them (the gate's alone: a cheap read) knows nothing of
	// convergence.
	Listed    bool
	Converged []string
	// Now is the look's time, on the monotonic clock.
	Now time.Time
}

// progressVerdict is what a look comes to.
type progressVerdict struct {
	// Fire: the count passed the deadline; write the record.
	Fire bool
	// List: read the nodes' records and look again with them (Listed)
	// before the next look: the count passed the deadline since the last
	// listing, or that is a quarter of the deadline old (or there is none
	// yet for the commit).
	List bool
	// Left is how long the count has to go, while it runs; 0 while it
	// does not (nothing to measure, or the gate closed).
	Left time.Duration
}

// progressClock counts the time the gate stayed open, since the later of
// the commit and the last node that turned converged on it, as this
// process saw them. Only the time between two looks that both saw the
// gate open counts: a gate that closed and opened again between them is
// not told from one that stayed open, so the interval in which it closed
// counts for nothing, and the one in which it opened from the look that
// saw it open. The count pauses while the gate is closed and goes on when
// it opens (it does not start over): a check that flaps or windows shorter
// than the deadline cannot keep it from passing, and a pause's time never
// counts. A node that turns converged starts it over, from the listing
// that shows it: listings come every quarter of the deadline, and right
// before the count would fire, so a convergence is never missed and is
// seen at most a quarter of the deadline late (which makes the deadline
// pass later, never earlier).
type progressClock struct {
	commit   string
	seen     map[string]bool // nodes seen converged on commit; nil before its first listing
	listedAt time.Time       // the last listing
	counted  time.Duration   // open time counted since the last convergence
	lastOpen time.Time       // the last look, when it saw the gate open and measured
	fired    bool            // this process wrote the commit's record
}

// look takes in one look and says whether to fire.
func (c *progressClock) look(l progressLook) progressVerdict {
	if l.Commit != c.commit {
		*c = progressClock{commit: l.Commit}
	}
	if l.Listed {
		c.listed(l)
	}
	if l.Commit == "" || l.Deadline <= 0 || l.Fired || c.fired || !l.Behind || !l.Open {
		c.lastOpen = time.Time{}
		return progressVerdict{}
	}
	if !c.lastOpen.IsZero() {
		c.counted += l.Now.Sub(c.lastOpen)
	}
	c.lastOpen = l.Now
	passed := c.counted >= l.Deadline
	if passed && l.Listed {
		return progressVerdict{Fire: true}
	}
	due := c.seen == nil || l.Now.Sub(c.listedAt) >= l.Deadline/4
	return progressVerdict{List: passed || due, Left: max(l.Deadline-c.counted, 0)}
}

// listed takes in the nodes a listing shows converged. The first listing
// of a commit only learns them: nodes converged on it before (a SHA
// committed again, or before this process started) are no progress.
func (c *progressClock) listed(l progressLook) {
	first := c.seen == nil
	if first {
		c.seen = map[string]bool{}
	}
	for _, n := range l.Converged {
		if !c.seen[n] {
			c.seen[n] = true
			if !first {
				c.counted, c.lastOpen = 0, time.Time{}
			}
		}
	}
	c.listedAt = l.Now
}

// blind says a look could not see: the time until the next one that does
// counts for nothing.
func (c *progressClock) blind() { c.lastOpen = time.Time{} }

// progressEvery is how often an agent whose node is behind reads its gate
// while it measures a deadline d (ReadFor, which costs the same in any
// fleet): within a tenth of it, at least every 30 s. It reads the nodes'
// records, which cost as much as the fleet is large, only when the clock
// asks (progressVerdict.List).
func progressEvery(d time.Duration) time.Duration {
	return min(max(d/10, time.Second), 30*time.Second)
}

// watchProgress measures the desired commit's progress deadline until ctx
// ends. The main loop hands it each group state it reads (offerProgress),
// so that an agent with nothing to measure (no deadline, its node
// converged, the deadline passed) reads nothing more; while it measures,
// it reads on its own, every progressEvery.
func (a *Agent) watchProgress(ctx context.Context) {
	var clk progressClock
	var read uint64 // the index of the latest state looked at
	for {
		var gs *coordinator.GroupState
		select {
		case <-ctx.Done():
			return
		case gs = <-a.progressIn:
		}
		if gs.Index < read {
			continue // read before what this watcher read itself
		}
		for {
			every, at := a.progressOnce(ctx, &clk, gs)
			read, gs = max(read, at), nil
			if every == 0 {
				break
			}
			retry.Sleep(ctx, every)
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// offerProgress hands gs to watchProgress, in place of one it has not
// taken yet.
func (a *Agent) offerProgress(gs *coordinator.GroupState) {
	select {
	case <-a.progressIn:
	default:
	}
	select {
	case a.progressIn <- gs:
	default:
	}
}

// progressOnce is one look of watchProgress, at gs or, when nil, at the
// group read now: how soon to look again, 0 when there is nothing to
// measure until the main loop reads the group again, and the index of the
// state it looked at.
func (a *Agent) progressOnce(ctx context.Context, clk *progressClock, gs *coordinator.GroupState) (time.Duration, uint64) {
	if gs == nil {
		var err error
		if gs, err = a.cfg.Store.ReadFor(ctx, a.cfg.Group, a.cfg.Node); err != nil {
			clk.blind()
			return jitter(retryPause), 0
		}
	}
	every := a.progressLookAt(ctx, clk, gs)
	return every, gs.Index
}

// progressLookAt is progressOnce at gs.
func (a *Agent) progressLookAt(ctx context.Context, clk *progressClock, gs *coordinator.GroupState) time.Duration {
	l := progressLook{Now: time.Now(), Fired: gs.Deadline != nil, Behind: !ownConverged(gs, a.cfg.Node)}
	if gs.Desired != nil && gs.Spec != nil {
		l.Commit, l.Deadline = coordinator.ClaimNote(gs.Desired), time.Duration(gs.Spec.Update.ProgressDeadline)
	}
	if l.Commit == "" || l.Deadline <= 0 || l.Fired || !l.Behind {
		clk.look(l)
		return 0
	}
	l.Open = coordinator.Evaluate(coordinator.GateInput{Group: gs, Now: wallclock.Now(), Mono: time.Now()}).Open
	v := clk.look(l)
	if v.List {
		var err error
		if l.Converged, err = a.cfg.Store.ConvergedOn(ctx, a.cfg.Group, gs.Desired.SHA); err != nil {
			clk.blind()
			return progressEvery(l.Deadline)
		}
		// The same time as the look: the gate is as that read it.
		l.Listed = true
		v = clk.look(l)
	}
	if v.Fire {
		again := a.fireDeadline(ctx, gs)
		if again == 0 {
			clk.fired = true // a state read before the record cannot start it again
		}
		return again
	}
	every := progressEvery(l.Deadline)
	if v.Left > 0 {
		every = min(every, v.Left)
	}
	return every
}

// fireDeadline writes the deadline record of the desired commit of gs, and
// says how soon to look again: not at all once it is written (the record
// is in every state read from then on), after a pause if Consul failed,
// or at the next look if the group as read again said no.
func (a *Agent) fireDeadline(ctx context.Context, gs *coordinator.GroupState) time.Duration {
	d := time.Duration(gs.Spec.Update.ProgressDeadline)
	fired, action, err := a.cfg.Store.FireDeadline(ctx, a.cfg.Group, a.cfg.Node, gs.Desired.SHA, gs.Desired.CommittedAt)
	switch {
	case err != nil:
		a.log.Warn("the progress deadline passed; cannot record it yet", "error", err)
		return jitter(retryPause)
	case fired:
		a.log.Warn("the progress deadline passed: failure_action applies", "reason", coordinator.DeadlineReason(d),
			"action", gs.Spec.Update.FailureAction, "applied", action)
		return 0
	}
	a.log.Info("the progress deadline passed here, but not for the group as read again (another node recorded it, or the gate closed)")
	return progressEvery(d)
}

// ownConverged says node's own record in gs says it converged on the
// desired SHA.
func ownConverged(gs *coordinator.GroupState, node string) bool {
	for _, n := range gs.Nodes {
		if n.Node == node {
			return gs.Desired != nil && n.SHA == gs.Desired.SHA && n.State.Verified()
		}
	}
	return false
}
