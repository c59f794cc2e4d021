package agent

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/wallclock"
)

// nodeRecord is this node's record in KV (coordinator.NodeState), and its
// only owner: it builds each record, writes those that go on their own,
// and is told of those that go in a transaction of lockstep's (a grant, a
// fence, a release), so that it knows what KV holds.
type nodeRecord struct {
	store *coordinator.Store
	group string
	node  string
	log   hclog.Logger
	// written is told of each record written, without waiting: the
	// catalog mirrors it.
	written func()

	mu    sync.Mutex
	last  coordinator.NodeState
	stale bool // KV holds something else than last: write it again
	// consulNode is the local Consul agent's node name, "" until learnt:
	// every record carries it (NodeState.ConsulNode).
	consulNode string
	// domain is this node's topology domain under the spread key of
	// update.max_parallel_per it was last read for ("" before any): every
	// record carries it (NodeState.Domain).
	domain string
	// imageID is the image the workload ran at the runtime's last
	// inspection (observe): every record carries it.
	imageID string
	// gate is the state of the gate at the last look, "" while it was
	// open: a record of a node that waits under it carries it.
	gate coordinator.GateState
	// blocked are the checks the looks saw not passing, since when
	// (coordinator.SeenBlocks): a record under a gate blocked_by_check
	// carries them. seenAdopted says those of the record found in KV at
	// the first look were taken over, so a restart keeps each since.
	blocked     []coordinator.BlockSeen
	seenAdopted bool
	// drained is what the agent put into Consul maintenance and has not
	// lifted yet (update.drain): every record carries it, so that KV holds
	// it before any is set, and a successor finds it (adopted).
	drained *coordinator.Drained
	// adopted says the drain of the record found in KV at the first look
	// was taken over: only then, as KV may still hold it after a lift.
	adopted bool
	// unindexed says the token may not write this node's stop index
	// (coordinator.Keys.Stopped): its records say so (StopIndex off), so
	// that readers read every record.
	unindexed bool
	// cleared says the stop index key a previous run may have left is
	// deleted (clearStopIndex), or that the token may not.
	cleared bool
	// unsure says the start-up probe of the token's right to write the stop
	// index got no answer: unindexed until one comes (resolveUnsure).
	unsure bool
}

// state builds this node's NodeState, keeping the previous Since when
// nothing changed, so that "since" means since the last change.
func (r *nodeRecord) state(sha, desired string, state coordinator.NodeStatus, errText string) coordinator.NodeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := coordinator.NodeState{Node: r.node, SHA: sha, Desired: desired, State: state, Error: errText, Since: wallclock.Now().UTC(),
		ConsulNode: r.consulNode, Domain: r.domain, ImageID: r.imageID, Drained: r.drained, StopIndex: !r.unindexed}
	if state.Waits() {
		n.Gate = r.gate
	}
	if n.Gate == coordinator.GateBlockedByCheck {
		n.Blocked = r.blocked
	}
	if n.Error == "" && r.drained != nil && len(r.drained.Missing) > 0 {
		n.Error = missingNote(r.drained.Missing)
	}
	if coordinator.SamePublished(r.last, n) {
		n.Since = r.last.Since
	}
	return n
}

// sawGate notes the gate's state at a look (v, at now, of gs), and the
// checks it blocks on that do not pass, for the records built from then on.
func (r *nodeRecord) sawGate(v coordinator.Verdict, gs *coordinator.GroupState, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gate = ""
	if !v.Open {
		r.gate = v.State
	}
	if !r.seenAdopted {
		r.seenAdopted = true
		for _, n := range gs.Nodes {
			if n.Node == r.node {
				r.blocked = n.Blocked
			}
		}
	}
	r.blocked = coordinator.SeenBlocks(r.blocked, gs.Health, now)
}

// observe notes what the runtime's inspection found, for the records
// built from then on.
func (r *nodeRecord) observe(obs Observed) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.imageID = obs.ImageID
}

// knowsConsulNode says the Consul agent's node name is learnt.
func (r *nodeRecord) knowsConsulNode() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.consulNode != ""
}

// consulName is the Consul agent's node name, "" until learnt.
func (r *nodeRecord) consulName() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.consulNode
}

// learnt notes the Consul agent's node name, for the records built from
// then on.
func (r *nodeRecord) learnt(consulNode string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.consulNode = consulNode
}

// inDomain notes this node's domain ("key=value"), for the records built
// from then on.
func (r *nodeRecord) inDomain(domain string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.domain = domain
}

// current is what was published last.
func (r *nodeRecord) current() coordinator.NodeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// sync marks what was published last as stale when gs shows another
// record for this node (overwritten, truncated or deleted by someone else),
// so that the next set writes it again.
func (r *nodeRecord) sync(gs *coordinator.GroupState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stale = r.last.State != ""
	for _, n := range gs.Nodes {
		if n.Node == r.node && coordinator.SamePublished(n, r.last) {
			r.stale = false
		}
		if n.Node == r.node && !r.adopted && n.Drained != nil {
			// A drain an agent of this node set before it stopped or
			// crashed: this one lifts it (Agent.undrain).
			r.log.Info("found a drain of this node's recorded, to lift", "services", len(n.Drained.Services), "reason", n.Drained.Reason)
			r.drained = n.Drained
		}
	}
	r.adopted = true
}

// drain is what is recorded drained now, nil when nothing is.
func (r *nodeRecord) drain() *coordinator.Drained {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drained
}

// setDrain sets what the records built from now on carry as drained.
func (r *nodeRecord) setDrain(d *coordinator.Drained) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drained = d
}

// differs says whether n needs writing: it is not what was published last,
// or that record is gone from KV.
func (r *nodeRecord) differs(n coordinator.NodeState) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	// StopIndex too, which SamePublished leaves out: a record that tells
	// readers the index is kept, or not, when that changed (indexDenied,
	// resolveUnsure) is written again at the next look.
	return r.stale || !coordinator.SamePublished(r.last, n) || r.last.StopIndex != n.StopIndex
}

// publishTimeout bounds one write of the node's record.
const publishTimeout = 30 * time.Second

// set publishes n if it differs from what was published last.
func (r *nodeRecord) set(ctx context.Context, n coordinator.NodeState) {
	if !r.differs(n) {
		return
	}
	// Bounded: a Consul client agent cut off from its servers may hold a
	// write for minutes, and a turn that is undoing a step must not wait
	// on its record; a record not written is written at the next look.
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if err := r.store.PutNode(ctx, r.group, n); err != nil {
		r.log.Warn("could not publish node state", "state", n.State, "error", err)
		return
	}
	r.published(ctx, n)
}

// published records n as written (by set or inside a fence) and asks for
// the service to be updated. It does not wait for that: a Consul client cut
// off from its servers holds its local state lock while it tries to sync,
// and a replacement must not wait on the UI.
func (r *nodeRecord) published(_ context.Context, n coordinator.NodeState) {
	r.mu.Lock()
	r.last, r.stale = n, false
	r.mu.Unlock()
	r.log.Info("node state", "state", n.State, "sha", coordinator.ShortSHA(n.SHA), "desired", coordinator.ShortSHA(n.Desired), "error", n.Error)
	r.written()
}
