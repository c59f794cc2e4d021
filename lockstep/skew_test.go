package lockstep

import (
	"errors"
	"testing"
	"time"
)

// A claim's lease is judged on one clock, the waiter's own: it reports a
// claim lost only after it has itself seen the claim's session gone for
// the whole lease, however far apart the clocks of the host that wrote the
// claim and of the waiter are. On 6d7f554 the waiter compared the claim's
// Until, written on the granter's clock, with its own: a waiter an hour
// ahead took the slot of a node the moment its session ended.
func TestLeaseIsJudgedOnTheWaitersClock(t *testing.T) {
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	behind := func() time.Time { return time.Now().Add(-time.Hour) }
	for _, tc := range []struct {
		name            string
		granter, waiter func() time.Time
	}{
		{"waiter's clock an hour ahead", time.Now, ahead},
		{"granter's clock an hour behind", behind, time.Now},
		{"waiter's clock an hour behind", time.Now, behind},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := devClient(t)
			g := commit(t, c, "sha-skew", 1)
			g.Lease = 3 * time.Second
			ctx := ctxFor(t, time.Minute)
			dead := newSem(t, c, "n1")
			dead.now = tc.granter
			if _, err := dead.AcquireWith(ctx, g, Writes{Note: "sha-skew"}); err != nil {
				t.Fatal(err)
			}
			endSession(t, dead.s)
			ended := time.Now()

			waiter := newSem(t, c, "n2")
			waiter.now = tc.waiter
			_, err := waiter.Acquire(ctx, g)
			waited := time.Since(ended)
			var lost *LostError
			if !errors.As(err, &lost) || lost.Name != "n1" {
				t.Fatalf("Acquire = %v, want n1's claim lost", err)
			}
			if waited < g.Lease {
				t.Fatalf("n1's claim reported lost %s after its session ended, before its %s lease", waited, g.Lease)
			}
		})
	}
}
