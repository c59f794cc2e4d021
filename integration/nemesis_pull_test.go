package integration

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
)

// pullProgress bounds how long after the registry answers again a rollout
// of a stalled release may go without converging, with no other fault
// under way meanwhile: the pulls that gave up under a slot are tried again
// at the agents' next look (the agent's retry pause), then each node's step
// takes at most a verify (testHealthyDeadline) and its pull.
const pullProgress = convergeBound

// pulls is what the nemesis knows of its commits from the registry, shared
// between the commits and the checker.
type pulls struct {
	mu      sync.Mutex
	end     map[string]time.Time // SHA -> when the stall met by its first pulls ended
	excused map[string]string    // SHA -> a fault under way after its stall, which may hold up its rollout
	judged  map[string]bool      // SHA -> its progress was judged
}

func (c *cluster) pullState() *pulls {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pulls == nil {
		c.pulls = &pulls{end: map[string]time.Time{}, excused: map[string]string{}, judged: map[string]bool{}}
	}
	return c.pulls
}

// pulled pushes a good release's image to the registry under a tag of
// this commit's own, so that every node's prepare must pull it, and
// stalls the registry's pulls for stall.
func (n *nemesis) pulled(local string, gen int, stall time.Duration) (string, time.Time, error) {
	r := n.c.registry()
	ref, err := r.push(local, fmt.Sprintf("gen-%d", gen))
	if err != nil {
		return "", time.Time{}, err
	}
	return ref, r.stall(stall), nil
}

// pullCommitted notes a commit from the registry, for checkPull.
func (n *nemesis) pullCommitted(sha string, end time.Time) {
	p := n.c.pullState()
	p.mu.Lock()
	p.end[sha] = end
	p.mu.Unlock()
	n.note("registry stalls pulls of %s until +%.1fs", coordinator.ShortSHA(sha), end.Sub(n.start).Seconds())
}

// checkPull is invariant (e), for the desired SHA of g:
//
//   - a prepare (a pull, stalled or failed) never counts a failure: no
//     failure record of the desired SHA says prepare, whatever the release;
//   - a release from the registry whose pulls were stalled converges
//     within pullProgress of the registry answering again, unless desired
//     moved, the gate closed (which says why), or another fault was under
//     way after the stall, which may hold it up (then the timeline shows
//     where each node stands, and (d) judges it once healed).
//
// That no stalled pull takes a node down is (a)'s, with Docker's health.
func (ck *checker) checkPull(g string, gs *coordinator.GroupState) {
	if gs.Desired == nil {
		return
	}
	sha := gs.Desired.SHA
	for _, f := range gs.Failures {
		if strings.Contains(f.Error, "prepare") || strings.Contains(f.Error, "pull") {
			ck.n.violate("e pullfail "+g+" "+coordinator.ShortSHA(sha), "(e) %s: %s's failure of %s counts a prepare: %q",
				g, f.Node, coordinator.ShortSHA(sha), f.Error)
		}
	}
	p := ck.n.c.pullState()
	p.mu.Lock()
	defer p.mu.Unlock()
	end, ok := p.end[sha]
	if !ok || p.judged[sha] {
		return
	}
	if r := ck.n.c.registry(); r.stalledUntil().After(end) {
		end = r.stalledUntil() // a later stall holds these pulls too
	}
	now := time.Now()
	if now.Before(end) {
		return
	}
	if why := ck.n.underFault(); why != "" && p.excused[sha] == "" {
		p.excused[sha] = why
	}
	if !gs.Gate().Open || ck.n.c.converged(g, ck.n.nodesOf(g), sha) {
		p.judged[sha] = true
		ck.n.t.Logf("(e) %s: %s, pulled through a stall, %.0fs after the registry answered: gate %q, converged %v (%d pulls met a stall so far)",
			g, coordinator.ShortSHA(sha), now.Sub(end).Seconds(), gs.Gate().Reason, gs.Gate().Open, ck.n.c.registry().stalled.Load())
		return
	}
	if now.Sub(end) < pullProgress {
		return
	}
	p.judged[sha] = true
	if why := p.excused[sha]; why != "" {
		ck.n.note("(e) %s: %s not converged %s after the registry answered, with %s meanwhile: %s",
			g, coordinator.ShortSHA(sha), pullProgress, why, ck.n.describe(g))
		return
	}
	ck.n.violate("e progress "+g+" "+coordinator.ShortSHA(sha), "(e) %s: %s not converged %s after the registry answered, with no other fault under way and the gate open: %s",
		g, coordinator.ShortSHA(sha), pullProgress, ck.n.describe(g))
}

// underFault names a fault under way, or says "".
func (n *nemesis) underFault() string {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	for node := range n.f.busy {
		return "a fault on " + node
	}
	if n.f.server != "" {
		return "server " + n.f.server + " down"
	}
	return ""
}

// stalledUntil is the end of the stall under way, or the last one.
func (r *pullRegistry) stalledUntil() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.until
}

// stallFor draws how long the registry stalls a commit's pulls: half the
// time less than the agent's bound on a pull under a slot, half the time
// more, which cuts the pulls that run under one and only a run longer than
// the 3 minutes test-integration gives lets end.
func (p *planner) stallFor() time.Duration {
	if p.rng.IntN(2) == 0 {
		return p.between(10, 90)
	}
	return agent.DefaultPrepareTimeout + p.between(10, 60)
}
