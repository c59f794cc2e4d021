package coordinator

import (
	"fmt"
	"time"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

// Verdict is the gate's answer for the desired SHA.
type Verdict struct {
	Open   bool
	State  GateState
	Reason string // why it is closed, or "open"
	SHA    string
	Limit  int // K while the gate is open, 0 while closed: what a grant may use
	// MaxParallel is the policy's K, from the desired spec, open or closed;
	// 0 only when there is no readable spec.
	MaxParallel int
}

// GateState is the kind of verdict, for scripts and metrics; Reason says
// the same for a person, with the details.
type GateState string

// Values of GateState; they are part of `status -o json`.
const (
	GateOpen        GateState = "open"
	GateCancelled   GateState = "cancelled"
	GatePaused      GateState = "paused"      // by failures
	GateUncommitted GateState = "uncommitted" // nothing committed
	GateUnreadable  GateState = "unreadable"  // the desired record does not decode
	GateSpecMissing GateState = "spec_missing"
)

// GateStates lists every GateState, for exporters that show each one.
var GateStates = []GateState{GateOpen, GateCancelled, GatePaused, GateUncommitted, GateUnreadable, GateSpecMissing}

// Gate evaluates whether a node behind the desired SHA may take a slot now.
// Every agent and `rollagent status` compute the same answer from the same
// state; no process owns the decision.
func (g *GroupState) Gate() Verdict {
	if g.DesiredUnreadable() {
		return Verdict{State: GateUnreadable, Reason: "the desired record is unreadable (see problems)"}
	}
	if g.Desired == nil {
		return Verdict{State: GateUncommitted, Reason: "nothing committed"}
	}
	v := Verdict{SHA: g.Desired.SHA}
	if g.Spec != nil {
		v.MaxParallel = g.Spec.Update.MaxParallel
	}
	switch {
	case g.Spec == nil:
		v.State, v.Reason = GateSpecMissing, "desired spec is missing from history"
	case g.Cancel != nil:
		v.State, v.Reason = GateCancelled, g.Cancel.describe()
	case g.OperatorPause != nil:
		v.State, v.Reason = GatePaused, g.OperatorPause.describe()
	case g.Pause != nil:
		v.State, v.Reason = GatePaused, fmt.Sprintf("paused after %d failure(s): %s", g.Pause.Failures, g.Pause.Reason)
	case g.Spec.Update.FailureAction == hashspec.FailurePause && len(g.Failures) >= g.Spec.Update.MaxFailures:
		v.State, v.Reason = GatePaused, fmt.Sprintf("paused: %d failure(s) reached max_failures=%d", len(g.Failures), g.Spec.Update.MaxFailures)
	default:
		v.Open, v.State, v.Reason, v.Limit = true, GateOpen, "open", g.Spec.Update.MaxParallel
	}
	return v
}

// LockGate is the lockstep gate for the desired SHA, checked by Consul in
// the transaction that grants the slot and in every fence.
func (g *GroupState) LockGate(k Keys) lockstep.Gate {
	v := g.Gate()
	return lockstep.Gate{DesiredKey: k.Desired(), DesiredIndex: g.DesiredPair.ModifyIndex,
		Closed: k.Closing(v.SHA), Brakes: k.Brakes(v.SHA), Limit: v.Limit}
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

// Progress counts nodes against the desired SHA: Summary's counts, in
// the shape callers that only wait for a rollout use.
type Progress struct {
	Total, Converged, Replacing, Verifying, Waiting, Failed, Other int
	Done                                                           bool
}

// Progress is Summary at the current time with the default grace, from
// what g holds (no node is lost unless g.Registered was filled).
func (g *GroupState) Progress() Progress { return g.Summary(time.Now(), DefaultLostAfter).Progress() }

// Progress is s's counts of the nodes that count; Other is the rest of
// them, in none of the fields.
func (s Summary) Progress() Progress {
	p := Progress{Total: s.Counted, Converged: s.ByState[StandingConverged], Replacing: s.ByState[StandingReplacing],
		Verifying: s.ByState[StandingVerifying], Waiting: s.ByState[StandingWaiting], Failed: s.ByState[StandingFailed], Done: s.Done}
	p.Other = p.Total - p.Converged - p.Replacing - p.Verifying - p.Waiting - p.Failed
	return p
}
