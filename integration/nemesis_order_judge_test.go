package integration

import (
	"fmt"
	"slices"
)

// recVer is one version of a node's record as the watch saw it.
type recVer struct {
	index     uint64
	sha       string
	converged bool
}

// shaVer is one version of a group's desired record as the watch saw it.
type shaVer struct {
	index uint64
	sha   string
}

// canaryFacts are what (g) judges a grant of a SHA with canaries on.
type canaryFacts struct {
	// canaries is the SHA's canary record in effect at the grant (the
	// latest version seen before it); seen says one was.
	canaries []string
	seen     bool
	// reset is the index of the latest commit (or rollback) of the SHA
	// before the grant, which deleted any earlier promotion of it.
	reset uint64
	// promotions are the indexes of the SHA's promotions: rollagent
	// promote's, and a rollback's, which promotes in its transaction.
	promotions []uint64
	auto       bool
	// converged is, per node, the indexes of its records seen converged
	// on the SHA.
	converged map[string][]uint64
}

// canaryVerdict is what (g) says of one grant.
type canaryVerdict int

const (
	canaryNotJudged canaryVerdict = iota // a canary's own grant, or a SHA with no canary stage
	canaryPromoted                       // after a promotion of this rollout
	canaryAuto                           // auto_promote, after every canary's record said converged
	canaryViolation
)

// judgeCanaryGrant is invariant (g) for the grant to node at index: a
// node that is no canary of the SHA is granted only after a promotion of
// this rollout (a promotion record written since its latest commit), or,
// under auto_promote, after every canary's record said converged on it
// since that commit. Exact for promotions: each is one transaction whose
// index the event log keeps, as the grant's. For auto-promotion only the
// order is exact; the wait of canary_healthy_time on the evaluator's own
// clock, and that no canary was down or failed meanwhile, are not judged
// from Consul (no record says when an evaluator promoted).
func judgeCanaryGrant(node string, index uint64, f canaryFacts) (canaryVerdict, string) {
	switch {
	case !f.seen:
		return canaryNotJudged, "its canary record was not seen"
	case len(f.canaries) == 0 || slices.Contains(f.canaries, node):
		return canaryNotJudged, ""
	}
	for _, p := range f.promotions {
		if p >= f.reset && p < index {
			return canaryPromoted, fmt.Sprintf("promoted at index %d", p)
		}
	}
	if f.auto {
		last, all := uint64(0), true
		for _, c := range f.canaries {
			first := uint64(0)
			for _, i := range f.converged[c] {
				if i > f.reset && i < index && (first == 0 || i < first) {
					first = i
				}
			}
			all = all && first != 0
			last = max(last, first)
		}
		if all {
			return canaryAuto, fmt.Sprintf("every canary converged by index %d", last)
		}
	}
	return canaryViolation, fmt.Sprintf("not a canary (%v); no promotion since the commit at index %d (promotions at %v), auto_promote=%v",
		f.canaries, f.reset, f.promotions, f.auto)
}

// afterFacts are what (h) judges a grant of a SHA with update.after on:
// the named group's history as the watch saw it.
type afterFacts struct {
	// from is the index of the latest commit of the grant's SHA before
	// the grant: the look that led to the grant read the named group
	// after it.
	from    uint64
	nodes   []string
	desired []shaVer            // the named group's desired versions, sorted by index
	records map[string][]recVer // its nodes' record versions, each sorted by index
}

// judgeAfterGrant is invariant (h) for a grant at index: whether the
// named group was converged on its own desired SHA (its desired record
// names it and every node's record says converged on it) at some index
// between from and the grant (some), and at the grant itself (atGrant).
// !some is a violation. some && !atGrant is a grant that raced a move of
// the named group: the gate reads it at each look and every 2 s in line
// (docs/gate.md), not in the grant's transaction, so the bound is that
// read, not the grant.
func judgeAfterGrant(index uint64, f afterFacts) (some, atGrant bool) {
	points := []uint64{f.from}
	for _, d := range f.desired {
		if d.index > f.from && d.index < index {
			points = append(points, d.index)
		}
	}
	for _, vs := range f.records {
		for _, v := range vs {
			if v.index > f.from && v.index < index {
				points = append(points, v.index)
			}
		}
	}
	slices.Sort(points)
	for _, p := range points {
		if f.convergedAt(p) {
			some = true
		}
	}
	return some, index > 0 && f.convergedAt(index-1)
}

// convergedAt says the named group was converged at index i: the latest
// versions at or before it.
func (f afterFacts) convergedAt(i uint64) bool {
	sha := ""
	for _, d := range f.desired {
		if d.index <= i {
			sha = d.sha
		}
	}
	if sha == "" || len(f.nodes) == 0 {
		return false
	}
	for _, n := range f.nodes {
		var cur *recVer
		for j := range f.records[n] {
			if v := &f.records[n][j]; v.index <= i {
				cur = v
			}
		}
		if cur == nil || !cur.converged || cur.sha != sha {
			return false
		}
	}
	return true
}
