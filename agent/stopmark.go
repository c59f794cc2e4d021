package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rollagent/rollagent/coordinator"
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
	case errors.Is(err, coordinator.ErrStopIndexDenied):
		r.indexDenied(err) // marked, without the index
	case err != nil:
		r.log.Warn("could not record this clean stop in the node's record", "error", err)
	case !marked:
		r.log.Info("node record changed since it was published; this clean stop is not marked in it")
	}
}

// probeStopIndex asks Consul, before the first record, whether the token
// may write this node's stop index (Store.MayIndexStops), so that the
// records say the truth from the first (StopIndex). An answer that is not
// a refusal leaves them saying it may: clearStopIndex, and the stop mark's
// own write, find out a refusal later.
func (r *nodeRecord) probeStopIndex(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	err := r.store.MayIndexStops(ctx, r.group, r.node)
	switch {
	case errors.Is(err, coordinator.ErrACLDenied):
		r.indexDenied(err)
	case err != nil:
		// No answer (Consul not up yet): the records say the index is not
		// kept until one comes (clearStopIndex asks again). Saying it is,
		// a stop under a policy from before the index would go unseen by
		// the index and, for up to coordinator's fullReadEvery, by every grant.
		r.mu.Lock()
		r.unindexed, r.unsure = true, true
		r.mu.Unlock()
	}
}

// resolveUnsure asks again whether the token may write the stop index,
// when the start-up probe got no answer: ok says the answer came.
func (r *nodeRecord) resolveUnsure(ctx context.Context) (ok bool) {
	r.mu.Lock()
	unsure := r.unsure
	r.mu.Unlock()
	if !unsure {
		return true
	}
	err := r.store.MayIndexStops(ctx, r.group, r.node)
	switch {
	case errors.Is(err, coordinator.ErrACLDenied):
		r.indexDenied(err)
	case err != nil:
		return false
	default:
		r.mu.Lock()
		r.unindexed = false // from the next record on
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.unsure = false
	r.mu.Unlock()
	return true
}

// clearStopIndex deletes the stop index key that this node's last clean
// stop left (coordinator.Keys.Stopped), once this agent's record without
// the mark is written: before, Down would no longer find the mark still in
// the record. Best effort, once per start: a key left behind costs readers
// one read of the record, never a wrong count. It is also where the agent
// learns that its token may not write the index.
func (r *nodeRecord) clearStopIndex(ctx context.Context) {
	r.mu.Lock()
	due := !r.cleared && !r.stale && r.last.State != "" && r.last.Stopped == nil
	r.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	if !r.resolveUnsure(ctx) || r.isUnindexed() {
		return
	}
	err := r.store.ClearStopped(ctx, r.group, r.node)
	switch {
	case errors.Is(err, coordinator.ErrACLDenied):
		r.indexDenied(err)
	case err != nil:
		r.log.Debug("could not clear this node's stop index; the next record tries again", "error", err)
		return
	}
	r.mu.Lock()
	r.cleared = true
	r.mu.Unlock()
}

// indexDenied notes that the token may not write this node's stop index:
// from now on its records say so (StopIndex off), and the record in KV,
// which says otherwise, is written again at the next look. It warns once.
func (r *nodeRecord) indexDenied(err error) {
	r.mu.Lock()
	was := r.unindexed
	r.unindexed, r.cleared = true, true
	r.stale = r.stale || r.last.State != ""
	r.mu.Unlock()
	if k, kerr := r.store.Keys(r.group); !was && kerr == nil {
		r.log.Warn(fmt.Sprintf(`the token may not write this node's stop index, so every grant of the group reads every node record; add key %q and key %q, each with policy = "write", to this agent's ACL policy (docs/examples/acl-policy.hcl)`,
			k.Stopped(r.node), k.DownCheck()), "error", err)
	}
}

func (r *nodeRecord) isUnindexed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unindexed
}
