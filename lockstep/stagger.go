package lockstep

import (
	"sync"
	"time"
)

// ReleaseClock remembers when this process first saw the latest release of
// a semaphore (the holders record's count, Holders.Released), on its own
// monotonic clock: Consul gives no time, and another host's wall clock may
// be off by minutes, so a stagger is measured from the moment the release
// was seen here, which is never before it happened. A process that starts
// counts from its first look, so it waits longer, never shorter. Safe for
// concurrent use; the zero value is ready.
type ReleaseClock struct {
	mu    sync.Mutex
	seen  bool      // a count was seen at all
	count uint64    // the count last seen
	at    time.Time // when count was first seen, from time.Now (monotonic)
	moved bool      // a release was seen: count is not 0, or it changed
}

// Seen notes that the count of releases is count now, and says when this
// process first saw it at that count. ok is false when nothing was ever
// released as far as it can tell: a count of 0 and no change of it.
func (c *ReleaseClock) Seen(count uint64) (at time.Time, ok bool) {
	return c.seenAt(count, time.Now())
}

func (c *ReleaseClock) seenAt(count uint64, now time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen || count != c.count {
		c.moved = c.moved || c.seen || count != 0
		c.seen, c.count, c.at = true, count, now
	}
	return c.at, c.moved
}

// staggerLeft is how long the head of the line, having read snap, still
// waits for g's stagger: 0 when it may take a slot now.
func (m *Semaphore) staggerLeft(g Gate, snap *snapshot) time.Duration {
	if g.Stagger <= 0 {
		return 0
	}
	at, ok := m.opts.Releases.Seen(snap.holders.Released)
	if !ok {
		return 0
	}
	return max(g.Stagger-time.Since(at), 0)
}
