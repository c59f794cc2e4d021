package coordinator

import (
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/wallclock"
)

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

// Progress counts nodes against the desired SHA: Summary's counts, in
// the shape callers that only wait for a rollout use.
type Progress struct {
	Total, Converged, Replacing, Verifying, Waiting, Failed, Other int
	Done                                                           bool
}

// Progress is Summary at the current time with the default grace, from
// what g holds (no node is lost unless g.Registered was filled).
func (g *GroupState) Progress() Progress {
	return g.Summary(wallclock.Now(), DefaultLostAfter).Progress()
}

// Progress is s's counts of the nodes that count; Other is the rest of
// them, in none of the fields.
func (s Summary) Progress() Progress {
	p := Progress{Total: s.Counted, Converged: s.ByState[StandingConverged], Replacing: s.ByState[StandingReplacing],
		Verifying: s.ByState[StandingVerifying], Waiting: s.ByState[StandingWaiting], Failed: s.ByState[StandingFailed], Done: s.Done}
	p.Other = p.Total - p.Converged - p.Replacing - p.Verifying - p.Waiting - p.Failed
	return p
}
