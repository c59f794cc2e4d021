package agent

import (
	"testing"
	"time"
)

// The agent's retries while Consul is unreachable grow from retryMin to
// DefaultRetry, each drawn from the upper half of its step so that a fleet
// that lost Consul at once does not come back at once, and start over after
// a success.
func TestBackoffIsJitteredAndExponential(t *testing.T) {
	var b backoff
	step := retryMin
	for i := range 12 {
		d := b.next()
		if d < step/2 || d > step {
			t.Fatalf("try %d: waited %s, want within [%s, %s]", i, d, step/2, step)
		}
		step = min(2*step, DefaultRetry)
	}
	b.reset()
	if d := b.next(); d > retryMin {
		t.Fatalf("after reset: waited %s, want at most %s", d, retryMin)
	}
	seen := map[time.Duration]bool{}
	for range 20 {
		b.reset()
		seen[b.next()] = true
	}
	if len(seen) < 2 {
		t.Fatal("20 first waits were all equal: no jitter")
	}
}
