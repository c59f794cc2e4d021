package coordinator

// PassedFence lists, under a CANCEL of the desired SHA, the nodes that had
// passed a fence toward it before the CANCEL and may still finish their
// step: nothing else can move for that SHA. A node counts if it holds its
// slot (its process, or its claim) and its record says either
//
//   - replacing, written by a fence (Fenced) in a transaction Consul
//     applied before the CANCEL's (a lower ModifyIndex): the destructive
//     call that fence let through may still run, for the fence-to-step
//     gap and the call's own length; or
//   - verifying toward the SHA: its new workload runs, and the node may
//     end on it: a CANCEL stops the drop of its old workload (fenced by
//     the gate), not the workload that passed its verification. That record is written a second into the health check, whenever the
//     fence before the start was, so its index says nothing.
//
// A "replacing" record without Fenced is the grant's or a reclaim's: the
// node passed no fence, and its first one fails on the CANCEL. The list is
// empty with no CANCEL, sorted by node as Nodes is.
func (g *GroupState) PassedFence() []NodeState {
	out := []NodeState{}
	if g.Cancel == nil || g.Desired == nil {
		return out
	}
	sha := g.Desired.SHA
	cancel := g.cancelPair(sha)
	if cancel == nil {
		return out
	}
	for _, n := range g.Nodes {
		if n.Desired != sha || !g.holdsSlot(n.Node) {
			continue
		}
		p := g.byKey[g.k.Node(n.Node)]
		switch {
		case n.State == StateVerifying && n.SHA == sha:
		case n.State == StateReplacing && n.Fenced != "" && p != nil && p.ModifyIndex < cancel.ModifyIndex:
		default:
			continue
		}
		out = append(out, n)
	}
	return out
}

// holdsSlot says whether node holds its slot: its process holds it now, or
// its claim stands (not reported lost), its process gone mid-step.
func (g *GroupState) holdsSlot(node string) bool {
	if g.Holders == nil {
		return false
	}
	for _, e := range g.Holders.Holding {
		if e.Name == node {
			return true
		}
	}
	c, ok := g.Holders.ClaimOf(node)
	return ok && !c.Lost
}
