package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/retry"
)

// The pause between tries of a cancel grows from cancelRetryMin to
// cancelRetryMax: a leader election is over in a second or two, and the
// operator waits for this command during an incident.
const (
	cancelRetryMin = 100 * time.Millisecond
	cancelRetryMax = 2 * time.Second
)

// cancelTries is what the tries of a cancel came to, for the message when
// none went through.
type cancelTries struct {
	n     int
	start time.Time
	last  error
	// maybe says a try reached Consul and lost its answer: the CANCEL may
	// be recorded.
	maybe bool
}

// cancelRetrying is Store.Cancel tried again on transient errors, with a
// growing pause, until it succeeds or ctx (the --timeout) ends. A CANCEL
// that did land on a try whose answer was lost is found on the next try,
// which then answers "already cancelled"; recorded says so. Once a try has
// read the desired SHA, later tries cancel that SHA or nothing: an
// automatic rollback meanwhile must not turn the operator's CANCEL onto
// the SHA it rolled back to.
func (c *CancelCmd) cancelRetrying(ctx context.Context, st *coordinator.Store) (res *coordinator.CancelResult, recorded bool, err error) {
	tr := cancelTries{start: time.Now()}
	pause := retry.NewSteady(cancelRetryMin, cancelRetryMax)
	sha := c.SHA
	for {
		tr.n++
		res, err := st.Cancel(ctx, c.Group, sha, c.Reason, who())
		if err == nil {
			return res, tr.maybe && res.AlreadyCancelled, nil
		}
		if res != nil && res.SHA != "" {
			sha = res.SHA
		}
		tr.last = err
		tr.maybe = tr.maybe || errors.Is(err, coordinator.ErrMaybeApplied)
		if !coordinator.IsTransient(err) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, false, err
		}
		sleep(ctx, pause.Next())
		if ctx.Err() != nil {
			return nil, false, tr.failure(c.Group, time.Now())
		}
	}
}

// failure says what an operator must know when no try went through:
// whether the CANCEL is recorded, and how to find out.
func (tr cancelTries) failure(group string, now time.Time) error {
	took := now.Sub(tr.start).Round(100 * time.Millisecond)
	if tr.maybe {
		return fmt.Errorf("the CANCEL of group %s MAY be recorded: a request reached Consul but its answer was lost (%s in %s); `rollagent status %s` tells: %w",
			group, tr.tries(), took, group, tr.last)
	}
	return fmt.Errorf("the CANCEL of group %s is NOT recorded: no answer from Consul (%s in %s); try again, or raise --timeout: %w",
		group, tr.tries(), took, tr.last)
}

func (tr cancelTries) tries() string {
	if tr.n == 1 {
		return "1 try"
	}
	return fmt.Sprintf("%d tries", tr.n)
}
