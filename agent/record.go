package agent

import (
	"context"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// recordTry bounds one try at recording a failure: a Consul client cut off
// from its servers holds a request for its RPC hold timeout (7 s) before
// it answers.
const recordTry = 10 * time.Second

// recordFailure records this node's failure to reach sha and applies
// failure_action, trying again with backoff while Consul cannot answer,
// until it does or the agent stops. A failure that is never counted lets a
// bad release roll on past max_failures, so one outage must not lose it.
// Each try has a deadline of its own, not the step's context's: a step that
// failed at its healthy_deadline has little or nothing of that left. The
// node still holds its slot meanwhile (unless its session ends), so the
// next node starts after the failure counts, not before.
func (a *Agent) recordFailure(ctx context.Context, sha, msg string) (coordinator.Action, error) {
	var b backoff
	for {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTry)
		action, err := a.cfg.Store.RecordFailure(tctx, a.cfg.Group, a.cfg.Node, sha, msg)
		cancel()
		if err == nil || !coordinator.IsTransient(err) {
			return action, err
		}
		a.cfg.Metrics.ConsulError()
		wait := b.next()
		a.log.Warn("cannot record the failure; trying again", "in", wait, "error", err)
		select {
		case <-a.stopping:
			return action, err
		case <-time.After(wait):
		}
	}
}
