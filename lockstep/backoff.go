package lockstep

import (
	"context"
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
