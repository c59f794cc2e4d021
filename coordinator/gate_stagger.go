package coordinator

import (
	"fmt"
	"sync"
	"time"

	"github.com/rollagent/rollagent/lockstep"
)

// GateStagger: the desired spec has update.stagger, and less than that has
// passed since the reader first saw the slot's latest release.
const GateStagger GateState = "stagger"

// ReleaseSeen is when the reader first saw the slot's latest release (its
// count, lockstep's Holders.Released), on its own monotonic clock: Consul
// keeps no time, and no host may read a time another host's clock wrote.
type ReleaseSeen struct {
	// At is that moment, from time.Now; zero when nothing was released as
	// far as the reader can tell.
	At time.Time
}

// staggerRule holds new grants until update.stagger has passed since the
// latest release, as this reader saw it, while a node is behind. A reader
// that started after the release counts from its first look, so it waits
// longer, never shorter. It only says so to a look: the head of the line,
// already waiting when the release comes, is held by lockstep
// (Gate.Stagger), which counts from the same sight (Store.NewSemaphore
// shares the store's clock), and whose grant's CAS on the holders record
// proves no release came since. A group with no node behind is not held:
// nothing waits for a grant, and its rollout is done.
type staggerRule struct{}

func (staggerRule) State() GateState { return GateStagger }

func (staggerRule) Close(in GateInput) (Closed, bool) {
	g := in.Group
	stagger := g.Spec.Update.Stagger.Std()
	at := g.Released.At
	if stagger <= 0 || at.IsZero() || !g.behind() {
		return Closed{}, false
	}
	var ago time.Duration
	if !in.Mono.IsZero() {
		ago = max(in.Mono.Sub(at), 0)
	}
	if ago >= stagger {
		return Closed{}, false
	}
	// No "in 3m" here: records keep the reason (Verdict.Wait says it).
	return Closed{Reason: fmt.Sprintf("stagger: next grant after %s from the last release", RoundWait(stagger)),
		Opens: "the end of the stagger opens the gate", Hold: true, Recheck: in.Now.Add(stagger - ago)}, true
}

// behind says some node's record is not converged on the desired SHA.
func (g *GroupState) behind() bool {
	for i := range g.Nodes {
		if standing(g.Desired, &g.Nodes[i]) != StandingConverged {
			return true
		}
	}
	return false
}

// releaseClocks are a store's sights of each slot's releases, by the
// slot's prefix, shared by its reads and its semaphores.
type releaseClocks struct {
	mu     sync.Mutex
	clocks map[string]*lockstep.ReleaseClock
}

// Releases is the clock of the releases of the slot at prefix that this
// store keeps (see ReleaseSeen).
func (s *Store) Releases(prefix string) *lockstep.ReleaseClock {
	r := s.releases
	if r == nil {
		return &lockstep.ReleaseClock{} // a first sight at every read: longer, never shorter
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clocks[prefix]
	if !ok {
		c = &lockstep.ReleaseClock{}
		r.clocks[prefix] = c
	}
	return c
}

// withRelease notes g's release count on the store's clock and puts in g
// when the store first saw it.
func (s *Store) withRelease(g *GroupState, k Keys) *GroupState {
	if g == nil {
		return g
	}
	var count uint64
	if g.Holders != nil {
		count = g.Holders.Released
	}
	if at, ok := s.Releases(k.Slot()).Seen(count); ok {
		g.Released = ReleaseSeen{At: at}
	}
	return g
}
