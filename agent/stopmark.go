package agent

import (
	"context"
	"time"

	"github.com/rollagent/rollagent/internal/wallclock"
)

// stopTimeout bounds the last write of a stopping agent: a service
// manager waits on it, and a Consul that does not answer must not hold the
// stop for long.
const stopTimeout = 5 * time.Second

// markStopped marks this node's record with the time of this clean stop,
// before the service leaves the catalog: status's grace before it calls a
// node gone from the catalog lost runs from it, not from the node's last
// change, which may be days old on an idle node. Only a record that is
// still what this agent published is marked (Store.MarkStopped).
func (r *nodeRecord) markStopped() {
	r.mu.Lock()
	n, stale := r.last, r.stale
	r.mu.Unlock()
	if n.State == "" || stale {
		return // nothing published, or KV holds something else: leave it
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	marked, err := r.store.MarkStopped(ctx, r.group, n, wallclock.Now())
	switch {
	case err != nil:
		r.log.Warn("could not record this clean stop in the node's record", "error", err)
	case !marked:
		r.log.Info("node record changed since it was published; this clean stop is not marked in it")
	}
}
