package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/lockstep"
)

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
		a.pub.set(ctx, a.carried(sha, sha, inVerify))
	})
	err := a.cfg.Runtime.WaitHealthy(ctx, spec)
	if !t.Stop() {
		<-wrote
	}
	return err
}

// fence runs check (hold.Fence, or hold.Check where the gate does not
// matter), retrying a failure to reach Consul (a leader election, say) for
// up to two thirds of the session TTL. Within that time a success proves
// the slot is still ours; past it, a partitioned holder may already have
// lost its slot to the next node, and it must undo its step at once rather
// than keep its node down beside that one. A closed gate or a lost session
// is final at once.
func (a *Agent) fence(ctx context.Context, hold *lockstep.Hold, check checkFunc, op *api.TxnOp) error {
	deadline := time.Now().Add(a.cfg.SessionTTL * 2 / 3)
	// Doubling; no wait past the deadline is taken, so the cap never bites.
	pause := retry.NewSteady(250*time.Millisecond, a.cfg.SessionTTL)
	for wait := pause.Next(); ; wait = pause.Next() {
		// Bound each try too: a Consul client cut off from its servers holds
		// a request for its RPC hold timeout (7s) before it answers.
		actx, cancel := context.WithDeadline(ctx, deadline)
		_, err := check(actx, op)
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

// stepGap reports the fence-to-step gap of a step: from its fence's
// transaction returning OK to the runtime being let take the step, which
// it issues next. A CANCEL that Consul applies after the fence cannot stop
// the step in that gap; README's "Guarantees and limits" gives it.
func (a *Agent) stepGap(step string, d time.Duration) {
	if m, ok := a.cfg.Metrics.(FenceGapMetrics); ok {
		m.FenceGap(d)
	}
	a.log.Debug("fence-to-step gap", "step", step, "gap", d)
}

// checkFunc is Hold.Fence or Hold.Check.
type checkFunc func(context.Context, ...*api.TxnOp) (*api.TxnResponse, error)

// Errors a runtime wraps for a replacement that failed through no fault of
// the release: they are never recorded as its failure; the node keeps its
// slot, and its next look decides under the gate as it is then.
var (
	// errInterrupted means the runtime found what an interrupted
	// replacement left: an agent killed in the middle of a call that the
	// runtime finished after the restarted agent had looked, or a new
	// workload created and never started.
	errInterrupted = errors.New("agent: an interrupted replacement must be recovered first")
	// errUnreachable means the runtime could not reach what runs the
	// workload (the Docker daemon), or saw it stop the workload as it went
	// away.
	errUnreachable = errors.New("agent: runtime unreachable")
	// errSetAside means the runtime could not set the old workload aside
	// (Docker: rename or stop the old container) to make room for the new
	// one: nothing of the release ran, so nothing of it failed.
	errSetAside = errors.New("agent: the old workload could not be set aside")
	// errWentDown ends a node's wait in line when its workload goes down
	// meanwhile: it then claims its slot ahead of the line (PlanClaimDown).
	errWentDown = errors.New("agent: the workload went down while the node waited in line")
	// errRecheck ends a node's wait in line when the gate may have changed
	// by what no write to KV announces (a maintenance window closed by the
	// clock, a Consul check it blocks on failed): Consul cannot check
	// either in the grant, so the node leaves the line and looks.
	errRecheck = errors.New("agent: the gate may have changed by the clock or a Consul check while the node waited in line")
	// errDrain means the node's services could not be put into Consul's
	// maintenance (update.drain), or its delay was cut short: nothing of
	// the release ran, and what was set is lifted.
	errDrain = errors.New("agent: the node could not be drained")
	// errStaleFence means every fence of a step came back later than
	// fenceFresh: none vouches for the step any more.
	errStaleFence = errors.New("agent: the step's fences came back too late to vouch for it")
)

type fenceError struct {
	step string
	err  error
}

func (e *fenceError) Error() string { return fmt.Sprintf("fence before %q: %v", e.step, e.err) }
func (e *fenceError) Unwrap() error { return e.err }

// record records node's failure to reach sha and applies failure_action,
// on a fresh context: the step's own may have run out, and a failure that
// goes unrecorded is a failure_action that never fires. A Consul error is
// tried again with backoff within settleTimeout.
func (a *Agent) record(ctx context.Context, node, sha, msg string) error {
	return a.recordPendingFailure(ctx, &pendingFailure{node: node, sha: sha, msg: msg})
}

// recordPendingFailure records p, as record says.
func (a *Agent) recordPendingFailure(ctx context.Context, p *pendingFailure) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.settleTimeout)
	defer cancel()
	var b backoff
	writer := a.cfg.Node // whose part of the log its events go in
	for {
		action, err := a.cfg.Store.RecordFailureBy(ctx, a.cfg.Group, writer, p.node, p.sha, p.msg)
		if err == nil {
			a.log.Info("failure recorded", "node", p.node, "action", actionName(action))
			a.unrecorded = nil
			return nil
		}
		if !recordLater(err) {
			a.log.Error("cannot record the failure", "error", err)
			a.unrecorded = nil
			return err
		}
		a.cfg.Metrics.ConsulError()
		d := b.next()
		if ctx.Err() != nil || time.Until(deadlineOf(ctx)) < d {
			a.log.Error("cannot record the failure yet; the next look tries again", "error", err)
			a.unrecorded = p
			return err
		}
		a.log.Warn("cannot record the failure yet", "in", d, "error", err)
		time.Sleep(d)
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func actionName(a coordinator.Action) string {
	switch a {
	case coordinator.ActionPause:
		return "pause"
	case coordinator.ActionRollback:
		return "rollback"
	}
	return "none"
}

// pendingFailure is a failure that could not be recorded yet: of node's to
// reach sha. A node lost is never pending: its failure is written with
// its claim's lost mark or not at all (reportLost).
type pendingFailure struct {
	node, sha, msg string
}

// recordPending records a failure a look before could not, before this
// look decides anything: a failure is counted even if Consul was out of
// reach when it happened.
func (a *Agent) recordPending(ctx context.Context) error {
	p := a.unrecorded
	if p == nil {
		return nil
	}
	return a.recordPendingFailure(ctx, p)
}

// recordLater says a failure that could not be recorded is kept, to be
// recorded at a later look, rather than dropped: an outage that passes,
// or a group that cannot be read whole now (coordinator.ErrGateUnread),
// under which the node acts on nothing until it can.
func recordLater(err error) bool {
	return coordinator.IsTransient(err) || errors.Is(err, coordinator.ErrGateUnread)
}
