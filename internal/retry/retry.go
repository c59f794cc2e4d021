// Package retry paces the tries of a loop that talks to Consul: one
// exponential backoff (github.com/cenkalti/backoff), with jitter so that a
// fleet that lost Consul together does not come back in step.
package retry

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff is an exponential backoff for one loop: each pause doubles the
// last, from first up to most. Not safe for concurrent use.
type Backoff struct {
	b backoff.ExponentialBackOff
	n int // failures since the last Reset
}

// New returns a jittered Backoff: the pause after the nth failure in a row
// is drawn from the upper half of first<<n, capped at most.
func New(first, most time.Duration) *Backoff {
	// The library draws from current*(1±factor): centred on 3/4 of the
	// bound with a factor of 1/3, that is [bound/2, bound].
	return &Backoff{b: backoff.ExponentialBackOff{InitialInterval: first * 3 / 4, RandomizationFactor: 1.0 / 3,
		Multiplier: 2, MaxInterval: most * 3 / 4}}
}

// NewSteady returns a Backoff without jitter: first, then doubled up to
// most. For a loop of one process, whose tries no fleet shares.
func NewSteady(first, most time.Duration) *Backoff {
	return &Backoff{b: backoff.ExponentialBackOff{InitialInterval: first, Multiplier: 2, MaxInterval: most}}
}

// Next is the pause before the next try; the one after it is longer.
func (r *Backoff) Next() time.Duration {
	r.n++
	return r.b.NextBackOff()
}

// Reset starts over after a success.
func (r *Backoff) Reset() {
	r.n = 0
	r.b.Reset()
}

// Retrying says a try failed since the last Reset.
func (r *Backoff) Retrying() bool { return r.n > 0 }

// Jitter draws from [d/2, d]: a fleet's retries after a shared outage
// spread out.
func Jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// Sleep waits d, or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
