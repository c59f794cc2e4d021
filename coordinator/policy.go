package coordinator

import (
	"fmt"

	"github.com/hashicorp/consul/api"
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

// OnFailure decides what the failures-th failure for spec leads to, in a
// group of nodes nodes that count (GroupState.NodeCount), which a
// percentage of max_failures is of.
func OnFailure(spec *hashspec.Spec, failures, nodes int) Action {
	u := spec.Update
	if failures < u.MaxFailures.Of(nodes) {
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

// NodeCount is the group's nodes that count, the number a percentage of
// update.max_parallel or max_failures is of: every node with a record in
// the group's nodes/, whether it decodes or not (Summary's rows). A node
// that `node rm` removed has no record and is not counted; one that status
// calls lost still is until then, since an agent's look does not read
// Consul's catalog and every reader of the gate must reach one number.
// Counting a record that does not decode makes K larger, not smaller; it
// is counted all the same, as Summary counts it among the group's nodes
// and it is a node that may come back.
func (g *GroupState) NodeCount() int { return max(g.NodeKeys, len(g.Nodes)+len(g.Invalid)) }

// Percentages says the desired spec's max_parallel or max_failures is a
// percentage, which a look must count the group's nodes for.
func (g *GroupState) Percentages() bool {
	return g.Spec != nil && (g.Spec.Update.MaxParallel.IsPercent() || g.Spec.Update.MaxFailures.IsPercent())
}

// membershipCheck is the grant's check that no node's record was removed
// since g was read, under a percentage of max_parallel: K only grows as the
// group grows, so a grant made on an older look uses a K no larger than
// the group at the grant means.
func (g *GroupState) membershipCheck(k Keys) api.TxnOps {
	if g.Spec == nil || !g.Spec.Update.MaxParallel.IsPercent() {
		return nil
	}
	return g.membershipAsRead(k)
}

// failureMembershipCheck is a failure write's check that no node's record
// was removed since g was read, under a percentage of max_failures: the
// threshold it decided on is the group's as read, and a `node rm` in
// between lowers it, which a failure counted against the old number
// would miss (or act on one the operator no longer means).
func (g *GroupState) failureMembershipCheck(k Keys) api.TxnOps {
	if g.Spec == nil || !g.Spec.Update.MaxFailures.IsPercent() {
		return nil
	}
	return g.membershipAsRead(k)
}

// membershipAsRead checks Keys.Membership at the index g read it at.
func (g *GroupState) membershipAsRead(k Keys) api.TxnOps {
	if g.MembershipIndex == 0 {
		return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k.Membership()}}}
	}
	return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: k.Membership(), Index: g.MembershipIndex}}}
}

// MaxFailures is the number update.max_failures of the desired spec
// means for the group as g holds it; 0 without a spec.
func (g *GroupState) MaxFailures() int {
	if g.Spec == nil {
		return 0
	}
	return g.Spec.Update.MaxFailures.Of(g.NodeCount())
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

// maxFailuresText is max_failures for a reason: "2", or a percentage with
// the number it means now, "10% (= 1 of 8 nodes)".
func maxFailuresText(g *GroupState) string {
	return AmountText(g.Spec.Update.MaxFailures, g.NodeCount())
}

// AmountText is a count as it is, or a percentage with the number it means
// for nodes nodes: "25% (= 2 of 8 nodes)".
func AmountText(a hashspec.Amount, nodes int) string {
	if !a.IsPercent() {
		return a.String()
	}
	return fmt.Sprintf("%s (= %d of %d nodes)", a, a.Of(nodes), nodes)
}
