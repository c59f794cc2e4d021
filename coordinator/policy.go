package coordinator

import (
	"fmt"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

// Verdict is the gate's answer for the desired SHA.
type Verdict struct {
	Open   bool
	Reason string // why it is closed, or "open"
	SHA    string
	Limit  int // K, from the desired spec's max_parallel
}

// Gate evaluates whether a node behind the desired SHA may take a slot now.
// Every agent and `rollagent status` compute the same answer from the same
// state; no process owns the decision.
func (g *GroupState) Gate() Verdict {
	if g.DesiredUnreadable() {
		return Verdict{Reason: "the desired record is unreadable (see problems)"}
	}
	if g.Desired == nil {
		return Verdict{Reason: "nothing committed"}
	}
	v := Verdict{SHA: g.Desired.SHA}
	switch {
	case g.Spec == nil:
		v.Reason = "desired spec is missing from history"
	case g.Cancel != nil:
		v.Reason = g.Cancel.describe()
	case g.Pause != nil:
		v.Reason = fmt.Sprintf("paused after %d failure(s): %s", g.Pause.Failures, g.Pause.Reason)
	case g.Spec.Update.FailureAction == hashspec.FailurePause && len(g.Failures) >= g.Spec.Update.MaxFailures:
		v.Reason = fmt.Sprintf("paused: %d failure(s) reached max_failures=%d", len(g.Failures), g.Spec.Update.MaxFailures)
	default:
		v.Open, v.Reason, v.Limit = true, "open", g.Spec.Update.MaxParallel
	}
	return v
}

// LockGate is the lockstep gate for the desired SHA, checked by Consul in
// the transaction that grants the slot and in every fence.
func (g *GroupState) LockGate(k Keys) lockstep.Gate {
	v := g.Gate()
	return lockstep.Gate{DesiredKey: k.Desired(), DesiredIndex: g.DesiredPair.ModifyIndex,
		Closed: k.Closing(v.SHA), Limit: v.Limit}
}

// Action is what a failure to reach a SHA leads to.
type Action int

const (
	// ActionNone: record the failure; the rollout goes on.
	ActionNone Action = iota
	// ActionPause: close the gate for this SHA until `rollagent resume`.
	ActionPause
	// ActionRollback: commit the previous SHA.
	ActionRollback
)

// OnFailure decides what the failures-th failure for spec leads to.
func OnFailure(spec *hashspec.Spec, failures int) Action {
	u := spec.Update
	if failures < u.MaxFailures {
		return ActionNone
	}
	switch u.FailureAction {
	case hashspec.FailurePause:
		return ActionPause
	case hashspec.FailureRollback:
		return ActionRollback
	}
	return ActionNone
}

// Progress counts nodes against the desired SHA.
type Progress struct {
	Total, Converged, Replacing, Waiting, Failed, Other int
	Done                                                bool
}

// Progress is done when every known node runs the desired SHA.
func (g *GroupState) Progress() Progress {
	var p Progress
	p.Total = len(g.Nodes)
	for _, n := range g.Nodes {
		switch {
		case g.Desired != nil && n.SHA == g.Desired.SHA && n.State == StateConverged:
			p.Converged++
		case n.State == StateReplacing || n.State == StateVerifying:
			p.Replacing++
		case n.State == StateWaiting:
			p.Waiting++
		case n.State == StateFailed:
			p.Failed++
		default:
			p.Other++
		}
	}
	p.Done = g.Desired != nil && p.Total > 0 && p.Converged == p.Total
	return p
}
