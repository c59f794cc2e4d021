package agent

import (
	"context"
	"errors"
	"time"

	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/lockstep"
)

// A drain refused by the local Consul agent (a token without
// service:write, an agent cut off from its servers) is tried again after
// drainRetryFirst, doubled at each refusal in a row up to drainRetryMost.
const (
	drainRetryFirst = 2 * time.Second
	drainRetryMost  = 2 * time.Minute
)

// drainRetry is the backoff between tries at a drain that failed.
func (a *Agent) drainRetry() *retry.Backoff {
	if a.drainTries == nil {
		a.drainTries = retry.New(drainRetryFirst, drainRetryMost)
	}
	return a.drainTries
}

// drainRefused says err, a drain's, was the local Consul agent's refusal
// or failure (a call, or the catalog not showing it in time), with the
// slot still held and the agent not stopping: what was set is lifted
// already, and nothing of the workload was touched. A fence's refusal,
// a lost slot, or an agent that stops, is not.
func (t *turn) drainRefused(err error) bool {
	stopping := t.stopping != nil && t.stopping.Err() != nil
	return errors.Is(err, errDrain) && !errors.Is(err, lockstep.ErrSessionLost) && !t.lost() && !stopping
}

// deferDrain ends a turn whose drain the local Consul agent refused: the
// node gives its slot back, with why in its record, and tries again after
// a backoff. Not a failure of the release, which never ran: counting it
// would pause or roll back a good release for one node's token or Consul
// agent. Nor kept under the slot: that would hold it from every other
// node for as long as the cause lasts, with the drain tried again and
// again, until progress_deadline.
func (t *turn) deferDrain(ctx context.Context, err error) ending {
	wait := t.a.drainRetry().Next()
	t.a.log.Warn("drain failed before anything was stopped; the node gives its slot back and tries again",
		"error", err, "retry_in", wait.Round(time.Millisecond))
	e := t.release(ctx, t.l.SHA, conclude(t.l, event{end: endDrainFailed, err: err.Error()}))
	e.retry = wait
	return e
}
