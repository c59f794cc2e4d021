package lockstep

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-hclog"
)

// retry is a jittered exponential backoff for one loop. Jitter spreads the
// fleet's retries when Consul comes back after an outage.
type retry struct {
	n   int
	log hclog.Logger
}

func (r *retry) reset() { r.n = 0 }

// wait sleeps after a Consul error, or until ctx ends.
func (r *retry) wait(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	d := DefaultRetryMin << min(r.n, 5)
	if d > DefaultRetryMax {
		d = DefaultRetryMax
	}
	d = d/2 + rand.N(d/2+1)
	r.n++
	r.log.Warn("consul error; retrying", "op", what, "in", d, "error", err)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// attempts runs once up to DefaultReleaseAttempts times: again at once
// after a CAS race, after a Consul error with backoff; any other error, or
// ctx ending, ends it. It returns the last error, nil on success.
func (m *Semaphore) attempts(ctx context.Context, what string, once func() error) error {
	r := retry{log: m.log}
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
