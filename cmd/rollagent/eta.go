package main

import (
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// eta is the time a rollout still needs at the pace observed so far.
type eta struct {
	left, perNode time.Duration
	basis         int // nodes converged since the commit
}

// estimate extrapolates from the nodes that converged since the commit: the
// span from the commit to the latest of them, per node, already includes
// handoffs, health waits and K > 1, so no policy needs modelling. There is
// no estimate before the first node converges, while the gate is closed,
// or while a node that counts is stuck (unknown, failed, invalid...), since
// then the pace does not tell when the rollout ends: it will not, alone.
func estimate(gs *coordinator.GroupState, sum coordinator.Summary, now time.Time) (eta, bool) {
	if gs.Desired == nil {
		return eta{}, false
	}
	if sum.Done {
		return eta{}, true
	}
	moving, stuck := sum.Left()
	if !sum.Gate.Open || stuck > 0 {
		return eta{}, false
	}
	var e eta
	var last time.Time
	if e.basis, last = pace(gs); e.basis == 0 {
		return eta{}, false
	}
	e.perNode = last.Sub(gs.Desired.CommittedAt) / time.Duration(e.basis)
	e.left = e.perNode*time.Duration(moving) - now.Sub(last)
	e.left = max(e.left, 0)
	return e, true
}

// String reads "eta 40s (20s per node)", "eta overdue (20s per node)"
// once the pace says the rollout should have ended, or "" when unknown.
func (e *etaJSON) String() string {
	if e == nil {
		return ""
	}
	d := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)).Round(time.Second) }
	left := d(e.Seconds).String()
	if e.Seconds <= 0 {
		left = "overdue"
	}
	return "eta " + left + " (" + d(e.PerNodeSeconds).String() + " per node)"
}

// pace is what the desired SHA's rollout has shown of its speed: how many
// nodes converged on it since its commit, and when the latest did. The
// span from the commit to then includes handoffs, health waits and K.
func pace(gs *coordinator.GroupState) (basis int, last time.Time) {
	for i := range gs.Nodes {
		n := &gs.Nodes[i]
		if !paced(gs, n) {
			continue
		}
		basis++
		if n.Since.After(last) {
			last = n.Since
		}
	}
	return basis, last
}

// paced says pace counts n: converged on the desired SHA since its commit.
func paced(gs *coordinator.GroupState, n *coordinator.NodeState) bool {
	return n.SHA == gs.Desired.SHA && n.State == coordinator.StateConverged && !n.Since.Before(gs.Desired.CommittedAt)
}
