package lockstep

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"
	pace "github.com/rollagent/rollagent/internal/retry"
)

// retry is the backoff of one loop after Consul errors: jittered, so that
// the fleet's retries spread out when Consul comes back after an outage.
type retry struct {
	b   *pace.Backoff
	log hclog.Logger
}

// retry starts the backoff of one of m's loops.
func (m *Semaphore) retry() *retry {
	return &retry{b: pace.New(retryMin, retryMax), log: m.log}
}

func (r *retry) reset() { r.b.Reset() }

// wait sleeps after a Consul error, or until ctx ends.
func (r *retry) wait(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	d := r.b.Next()
	r.log.Warn("consul error; retrying", "op", what, "in", d, "error", err)
	pace.Sleep(ctx, d)
}

// attempts runs once up to DefaultReleaseAttempts times: again at once
// after a CAS race, after a Consul error with backoff; any other error, or
// ctx ending, ends it. It returns the last error, nil on success.
func (m *Semaphore) attempts(ctx context.Context, what string, once func() error) error {
	r := m.retry()
	var err error
	for i := 0; i < DefaultReleaseAttempts; i++ {
		err = once()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case isConsulErr(err):
			r.wait(ctx, what, err)
		case !errors.Is(err, errRace):
			return err
		}
	}
	return err
}
