package agent

import (
	"errors"
	"time"
)

// stopSignalWait bounds how long a turn whose hook died by a signal the
// agent did not send waits for the agent's own stop signal. A stop that
// kills hooks (systemd's KillMode=control-group, which the shipped unit
// no longer uses; hooks run in process groups of their own) signals every
// process of the unit in one pass, so the agent's signal follows its
// hook's within milliseconds.
const stopSignalWait = time.Second

// cutOffByStop says the replace step's failure, err, is the agent's stop
// cutting it off, as a kill of the agent mid-hook does: the hook ended
// while the agent stops, the stop's signal having reached the hook too
// (systemd's KillMode=control-group)
// and the hook having caught it or died of it; or a signal the agent did
// not send killed the hook, and the agent's own stop follows. Such a step
// is undone and counts no failure. A release that is really bad fails
// again at the node's next turn, and is counted then.
func (t *turn) cutOffByStop(err error) bool {
	if t.stopping == nil {
		return false
	}
	var ke *killedError
	if t.stopping.Err() == nil && errors.As(err, &ke) {
		timer := time.NewTimer(stopSignalWait)
		defer timer.Stop()
		select {
		case <-t.stopping.Done():
		case <-timer.C:
		}
	}
	if t.stopping.Err() == nil {
		return false
	}
	t.a.log.Warn("the step failed as the agent stops: undoing it, counting no failure", "error", err)
	return true
}
