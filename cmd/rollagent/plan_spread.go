package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

// plannedDomains are the nodes' domains under spec's max_parallel_per, as
// the gate will read them once spec is committed (Store.Domains): those
// withUnavailable read for the desired spec when its key is the same, else
// read for spec's key. nil without max_parallel_per.
func plannedDomains(ctx context.Context, st *coordinator.Store, gs *coordinator.GroupState, spec *hashspec.Spec) (map[string]string, error) {
	p := spec.Update.MaxParallelPer
	if p == nil {
		return nil, nil
	}
	if old := spreadOf(gs); old != nil && old.Key == p.Key {
		// A failure to read them is a problem withUnavailable gave.
		return gs.Domains, nil
	}
	return st.Domains(ctx, gs.Group, p.Key)
}

// spreadOrder puts the moves, within each of the gate's phases (moveRank)
// and after the nodes down, in the order in which a line with a bound per
// domain moves fastest: each domain's first node, then each one's second,
// and so on. The line is first come, first served, and a head whose domain
// is full holds it (lockstep), so the order is the best case: agents that
// join the line domain by domain take longer.
func spreadOrder(moves []moveJSON) {
	type phase struct {
		rank   int
		domain string
	}
	seen := map[phase]int{}
	turn := make(map[string]int, len(moves))
	for _, m := range moves {
		if m.Domain == "" {
			continue // a domain of its own: never waits for another node
		}
		ph := phase{moveRank(m), m.Domain}
		turn[m.Node] = seen[ph]
		seen[ph]++
	}
	slices.SortStableFunc(moves, func(a, b moveJSON) int {
		return cmp.Or(moveRank(a)-moveRank(b), boolRank(a.Down == "")-boolRank(b.Down == ""), turn[a.Node]-turn[b.Node])
	})
}

// planWaves is how many waves the moves take in their order: each grants,
// first come first served, up to k nodes and at most perDomain of one
// domain (0: no such bound), and a head whose domain is full holds the
// line, as the gate's does. The canaries, the rest and the nodes that go
// last (moveRank) take waves of their own: the gate holds each until the
// one before converged.
func planWaves(moves []moveJSON, k, perDomain int) int {
	waves := 0
	for i := 0; i < len(moves); {
		j := i
		for j < len(moves) && moveRank(moves[j]) == moveRank(moves[i]) {
			j++
		}
		waves += phaseWaves(moves[i:j], max(k, 1), perDomain)
		i = j
	}
	return waves
}

// phaseWaves is planWaves for one phase.
func phaseWaves(line []moveJSON, k, perDomain int) int {
	waves := 0
	for len(line) > 0 {
		waves++
		used := map[string]int{}
		n := 0
		for ; n < len(line) && n < k; n++ {
			d := line[n].Domain
			if perDomain > 0 && d != "" && used[d] >= perDomain {
				break
			}
			used[d]++
		}
		line = line[n:]
	}
	return waves
}

// paceWaves is how many waves the rollout of the desired SHA took for the
// nodes pace counts, at its K (oldK) and under its max_parallel_per, by
// the domains the group has now (GroupState.Domains): a spread slowed it
// as it slows the plan's, and the time a wave took must not count it twice.
func paceWaves(gs *coordinator.GroupState, basis, oldK int) int {
	p := spreadOf(gs)
	if p == nil || gs.Domains == nil {
		return ceilDiv(basis, oldK)
	}
	var moves []moveJSON
	for i := range gs.Nodes {
		if n := &gs.Nodes[i]; paced(gs, n) {
			moves = append(moves, moveJSON{Node: n.Node, Domain: gs.Domains[n.Node]})
		}
	}
	spreadOrder(moves)
	return planWaves(moves, oldK, p.Max)
}

// spreadText says a spread for a person: "at most 1 per zone".
func spreadText(p *hashspec.Spread) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("at most %d per %s", p.Max, p.Key)
}
