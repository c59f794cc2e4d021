package integration

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/fleetwatch"
)

// checkDown is invariant (a), on the monitor's down count: every node of
// the group, judged by Docker (or the health hook) alone.
func (ck *checker) checkDown(s *fleetwatch.Sample) {
	g, ws, gs, down := s.Group, s.Workloads, s.State, s.Down
	holding := maps.Clone(ck.held) // Consul out of reach: the last known claims
	if gs != nil {
		holding = map[string]bool{}
		if gs.Holders != nil {
			for _, e := range gs.Holders.Holding {
				holding[e.Name] = true
			}
		}
	}
	nodes := ck.n.nodesOf(g)
	isDown := map[string]bool{}
	for _, nd := range down {
		isDown[nd] = true
	}
	idle, grand := ck.forgiven(g, nodes, isDown, holding)
	line := fmt.Sprintf("down %v (nemesis-made %v, forgiven %v) holding %v", down, idle, grand, slices.Sorted(maps.Keys(holding)))
	if ck.prevDown[g] != line {
		ck.prevDown[g] = line
		// With each node's containers as Docker lists them, so that a
		// violation can be told from the timeline alone.
		var seen []string
		for _, nd := range nodes {
			seen = append(seen, fmt.Sprintf("%s %q", nd, ws[nd].Status))
		}
		ck.n.note("%s %s; %s", g, line, strings.Join(seen, "; "))
	}
	k := ck.n.k(g)
	if bound := max(k, len(idle)) + len(grand); len(down) > bound {
		ck.n.violate("a "+g, "(a) %s: %d unavailable %v > max(K=%d, nemesis-made %v) + forgiven %v; holding %v",
			g, len(down), down, k, idle, grand, slices.Sorted(maps.Keys(holding)))
	}
}

// forgiven updates N and G of invariant (a) from this sample and returns
// the nodes of each that are down now.
func (ck *checker) forgiven(g string, nodes []string, isDown, holding map[string]bool) (idle, grand []string) {
	f, now := ck.n.f, time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	ck.onsets(nodes, isDown, holding, now)
	blind := ck.blind(nodes, now)
	for _, nd := range nodes {
		if holding[nd] && !ck.held[nd] && blind != "" && f.idle[nd] == nil {
			f.grand[nd] = true
			ck.n.note("%s: %s granted while the rollout could not yet know of %s", g, nd, blind)
		}
		ck.held[nd] = holding[nd]
	}
	for _, nd := range nodes {
		up := !isDown[nd]
		if o := f.idle[nd]; o != nil && o.revived && (up || holding[nd]) {
			delete(f.idle, nd)
		}
		if f.grand[nd] && up && !holding[nd] {
			delete(f.grand, nd)
		}
		switch {
		case up:
		case f.idle[nd] != nil:
			idle = append(idle, nd)
		case f.grand[nd]:
			grand = append(grand, nd)
		}
	}
	return idle, grand
}

// onsets notes the first sample that sees each node of N down, and puts
// in G the nodes of its group down or holding a slot then: their steps
// began before the outage. It then asks Consul, within each outage's
// detectWindow, whether it shows one of the node's checks not passing:
// from then on the rollout could know. f.mu is held.
func (ck *checker) onsets(nodes []string, isDown, holding map[string]bool, now time.Time) {
	f := ck.n.f
	for _, nd := range nodes {
		o := f.idle[nd]
		if o == nil || !o.onset.IsZero() || !isDown[nd] {
			continue
		}
		o.onset = now
		var in []string
		for _, other := range nodes {
			// A node of N that holds a slot began its step before this
			// outage too: in G, it stays forgiven once its own fault ends
			// while that step still runs.
			if other != nd && (holding[other] || (isDown[other] && f.idle[other] == nil)) {
				f.grand[other] = true
				in = append(in, other)
			}
		}
		ck.n.note("%s (%s) seen down; forgiven while their steps run: %v", nd, o.cause, in)
	}
	for _, nd := range nodes {
		o := f.idle[nd]
		if o == nil || o.onset.IsZero() || o.notice || !o.known.IsZero() || now.After(o.onset.Add(detectWindow)) {
			continue
		}
		if ck.consulSeesDown(nd) {
			o.known = now
			ck.n.note("Consul shows a check of %s not passing, %s after it was seen down", nd, now.Sub(o.onset).Round(time.Millisecond))
		}
	}
}

// blind names an outage of N that the rollout could not know of yet, or
// returns "". f.mu is held.
func (ck *checker) blind(nodes []string, now time.Time) string {
	for _, nd := range nodes {
		o := ck.n.f.idle[nd]
		if o == nil || o.onset.IsZero() || o.notice {
			continue
		}
		end := o.onset.Add(detectWindow)
		if !o.known.IsZero() && o.known.Before(end) {
			end = o.known
		}
		if now.Before(end) || now.Equal(end) {
			return fmt.Sprintf("%s (%s, seen down %s ago)", nd, o.cause, now.Sub(o.onset).Round(time.Millisecond))
		}
	}
	return ""
}

// consulSeesDown says Consul shows one of node's checks (its host's
// serfHealth, its agent's, its workload's) not passing.
func (ck *checker) consulSeesDown(node string) bool {
	checks, _, err := ck.n.c.api().Health().Node(node, nil)
	if err != nil {
		return false
	}
	for _, ch := range checks {
		if ch.Status != api.HealthPassing {
			return true
		}
	}
	return false
}
