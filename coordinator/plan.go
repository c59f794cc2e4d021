package coordinator

import (
	"context"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
)

// Planned is g as it would be right after a commit of spec (whose SHA is
// sha) at now, for `rollagent plan`: the same nodes, holders and brakes,
// with the new SHA desired and the records of that SHA (a CANCEL, a
// failure pause, its failures) in place of the old one's, so that
// Evaluate gives the verdict the commit would meet. An operator's pause
// holds the group across commits and stays; the health of the checks the
// new spec blocks on, and the groups of its update.after, are read again. g is not changed, and nothing is
// written.
func (s *Store) Planned(ctx context.Context, g *GroupState, spec *hashspec.Spec, sha string, now time.Time) *GroupState {
	p := g.plannedAs(spec, sha, now)
	if p.Canaries != nil {
		// As the commit chooses them: spread, and without the nodes
		// that go last, which the records alone cannot tell.
		p.Canaries.Nodes = s.chooseCanaries(ctx, g.Group, sha, spec.Update, g.Nodes, g.Registered)
		p.CanaryNodes = nil
		for _, n := range g.Nodes {
			if p.Canaries.Has(n.Node) {
				p.CanaryNodes = append(p.CanaryNodes, n)
			}
		}
	}
	return s.withOrder(ctx, s.withHealth(ctx, p, false), "")
}

// plannedAs is Planned without the health read: the records alone.
func (g *GroupState) plannedAs(spec *hashspec.Spec, sha string, now time.Time) *GroupState {
	p := *g
	d := Desired{SHA: sha, CommittedAt: now.UTC(), Reason: "plan"}
	if g.Desired != nil {
		d.Previous = g.Desired.SHA
	}
	p.Desired, p.Spec, p.Health, p.After, p.Last = &d, nil, nil, nil, nil
	p.Cancel, p.Pause, p.OperatorPause, p.Failures = nil, nil, nil, nil
	p.Canaries, p.Promoted, p.promotionRecorded, p.CanaryNodes, p.CanarySeen = nil, nil, false, nil, CanarySeen{}
	p.Problems = append([]string(nil), g.Problems...)
	// The planned desired record is not in byKey: resolveDesired reads
	// the records of sha from it and takes the spec from history, where
	// a SHA never committed is not; the spec is given instead.
	p.DesiredPair = &api.KVPair{Key: g.k.Desired()}
	if g.DesiredPair != nil {
		p.DesiredPair.ModifyIndex = g.DesiredPair.ModifyIndex
	}
	p.History = append(append([]HistoryEntry(nil), g.History...), HistoryEntry{SHA: sha, CommittedAt: d.CommittedAt, spec: spec})
	p.resolveDesired(g.k, g.byKey)
	p.History = p.History[:len(g.History)]
	if spec != nil && spec.Update.Canary > 0 {
		// What the commit would write: its own choice, and no promotion
		// (a commit deletes an earlier rollout's).
		p.Canaries = &Canaries{SHA: sha, Nodes: ChooseCanaries(sha, canaryPool(g.Nodes, g.Registered), spec.Update.Canary)}
		p.Promoted, p.promotionRecorded, p.CanaryNodes = nil, false, nil
		for _, n := range g.Nodes {
			if p.Canaries.Has(n.Node) {
				p.CanaryNodes = append(p.CanaryNodes, n)
			}
		}
	}
	return &p
}
