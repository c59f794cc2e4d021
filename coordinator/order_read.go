package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/wallclock"
)

// withOrder fills g.After and g.Last when the desired spec has
// update.after or update.last and a node it read is behind (a settled
// group is held by neither, and an agent whose node has converged reads
// nothing more): for an agent (node names its own record), the Consul
// node of the store's agent is the one judged for last.
func (s *Store) withOrder(ctx context.Context, g *GroupState, node string) *GroupState {
	if g == nil || g.Spec == nil || g.settled() {
		return g
	}
	u := &g.Spec.Update
	for _, name := range u.After {
		g.After = append(g.After, s.groupProgress(ctx, name))
	}
	if u.Last != nil {
		g.Last = s.lastState(ctx, g, node)
	}
	return g
}

// groupProgress reads how far group is on its own desired SHA: its
// desired record, that SHA's spec and every node's record, in one
// transaction checked against desired's index, and the catalog, so that
// a node lost from it no longer counts, as in status.
func (s *Store) groupProgress(ctx context.Context, group string) GroupProgress {
	p := GroupProgress{Group: group}
	k, err := s.Keys(group)
	if err != nil {
		p.Err = err.Error()
		return p
	}
	var g *GroupState
	for range readForAttempts {
		var moved bool
		if g, moved, err = s.readProgress(ctx, k, group); err != nil || !moved {
			break
		}
	}
	switch {
	case err != nil:
		p.Err = err.Error()
		return p
	case g == nil:
		p.Err = "desired moved at every read"
		return p
	case g.Desired == nil:
		if g.DesiredUnreadable() {
			p.Err = "its desired record does not decode"
		}
		return p
	}
	p.SHA = g.Desired.SHA
	if g.Spec != nil {
		p.After = g.Spec.Update.After
	}
	reg, err := s.Registered(ctx, group)
	if err != nil {
		reg = nil // not known: no node is taken for gone
	}
	sum := Summarize(SummaryInput{Gate: Verdict{Open: true}, Desired: g.Desired, Nodes: g.Nodes, Invalid: g.Invalid,
		Failures: g.Failures, Registered: reg, LostAfter: s.lostAfter(), Now: wallclock.Now()})
	p.Converged, p.Counted = sum.ByState[StandingConverged], sum.Counted
	return p
}

// readProgress reads groupProgress's records; moved says desired moved
// between its two requests. g is nil only when moved.
func (s *Store) readProgress(ctx context.Context, k Keys, group string) (g *GroupState, moved bool, err error) {
	desired, meta, err := s.Get(ctx, k.Desired(), nil)
	if err != nil {
		return nil, false, err
	}
	if desired == nil {
		if err := s.probeDenied(ctx, k.Desired()); err != nil {
			return nil, false, err
		}
		return Parse(k, group, nil, meta.LastIndex), false, nil
	}
	var d Desired
	if decode(desired.Key, desired.Value, &d) != nil {
		return Parse(k, group, api.KVPairs{desired}, meta.LastIndex), false, nil
	}
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: desired.Key, Index: desired.ModifyIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: k.History(d.SHA)}},
		{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: k.NodesPrefix()}},
	}
	resp, moved, err := s.txn(ctx, ops)
	if moved || err != nil {
		return nil, moved, err
	}
	pairs := api.KVPairs{desired}
	for _, r := range resp.Results {
		// A tree of history/<sha> also holds history/<sha>x: keep the key.
		if kv := r.KV; kv != nil && (kv.Key == k.History(d.SHA) || strings.HasPrefix(kv.Key, k.NodesPrefix())) {
			pairs = append(pairs, kv)
		}
	}
	return Parse(k, group, pairs, meta.LastIndex), false, nil
}

// lastState reads what update.last is judged on: where its check passes
// and, for an agent (node != ""), its own Consul node and, only when the
// check passes there, every node's record of the group; for a reader of
// the whole group (node == ""), the records it read.
func (s *Store) lastState(ctx context.Context, g *GroupState, node string) *LastState {
	l := &LastState{Check: g.Spec.Update.Last.Check}
	passing, err := s.passingOn(ctx, l.Check)
	if err != nil {
		l.Err = err.Error()
		return l
	}
	l.Passing = passing
	nodes, invalid := g.Nodes, g.Invalid
	if node != "" {
		local, err := s.c.Agent().NodeName()
		if err != nil || local == "" {
			l.Err = fmt.Sprintf("cannot read the local Consul agent's node name (agent:read on it): %v", consulError(s.c, err))
			return l
		}
		l.Local = local
		if !l.GoesLast(local) {
			return l
		}
		k, err := s.Keys(g.Group)
		if err != nil {
			l.Err = err.Error()
			return l
		}
		pairs, _, err := s.list(ctx, k.NodesPrefix(), nil)
		if err != nil {
			l.Err = err.Error()
			return l
		}
		all := Parse(k, g.Group, pairs, 0)
		nodes, invalid = all.Nodes, all.Invalid
	}
	l.Behind = s.behindLast(ctx, g, l, node, nodes, invalid)
	return l
}

// behindLast are the nodes of l.Behind: counted as status counts them.
func (s *Store) behindLast(ctx context.Context, g *GroupState, l *LastState, self string, nodes []NodeState, invalid []InvalidNode) []string {
	reg := g.Registered
	if reg == nil {
		reg, _ = s.Registered(ctx, g.Group) // nil when unknown: no node is taken for gone
	}
	sum := Summarize(SummaryInput{Gate: Verdict{Open: true}, Desired: g.Desired, Nodes: nodes, Invalid: invalid,
		Failures: g.Failures, Registered: reg, LostAfter: s.lostAfter(), Now: wallclock.Now()})
	var out []string
	for _, r := range sum.Rows {
		if !r.Counts || r.Standing == StandingConverged || r.Node == self || (r.Record != nil && l.GoesLast(r.Record.ConsulNode)) {
			continue
		}
		out = append(out, r.Node)
	}
	slices.Sort(out)
	return out
}

// passingOn lists the Consul nodes on which the check named check (its
// name or its ID) passes, sorted.
func (s *Store) passingOn(ctx context.Context, check string) ([]string, error) {
	q := (&api.QueryOptions{Filter: fmt.Sprintf("CheckID == %q or Name == %q", check, check)}).WithContext(ctx)
	checks, meta, err := s.c.Health().State(api.HealthPassing, q)
	if err != nil {
		return nil, consulError(s.c, err)
	}
	if meta.ResultsFilteredByACLs {
		return nil, fmt.Errorf("consul: permission denied: the token may not read every instance of the check (node:read and service:read), so Consul left some out")
	}
	var out []string
	for _, c := range checks {
		if c.Status == api.HealthPassing && !slices.Contains(out, c.Node) {
			out = append(out, c.Node)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Polled is g with what no write to its KV announces read again: the
// health of the checks its desired spec blocks on, the progress of the
// groups of update.after and the check of update.last, for an agent
// (node names its record) that waits in line. g itself is not changed.
func (s *Store) Polled(ctx context.Context, g *GroupState, node string) *GroupState {
	out := *g
	if g.Spec == nil {
		return &out
	}
	if g.Spec.Update.Blocks() {
		out.Health = s.BlockHealth(ctx, &g.Spec.Update, true)
	}
	out.After, out.Last = nil, nil
	return s.withOrder(ctx, &out, node)
}

// Polls says g's gate has rules judged on what no write to its KV
// announces (Polled reads them again).
func (g *GroupState) Polls() bool {
	if g.Spec == nil {
		return false
	}
	u := &g.Spec.Update
	return u.Blocks() || len(u.After) > 0 || u.Last != nil
}
