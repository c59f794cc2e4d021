package coordinator

import (
	"fmt"
	"slices"
)

// GateWaitingToGoLast: the desired spec has update.last, its check passes
// on the evaluating node, and another node of the group has not converged.
const GateWaitingToGoLast GateState = "waiting_to_go_last"

// LastState is what update.last is judged on, read with the group's state
// (Store.Read, ReadFor).
type LastState struct {
	Check string
	// Passing are the Consul nodes the check passes on, sorted: the nodes
	// that go last. Critical, warning or absent is not passing.
	Passing []string
	// Local is the Consul node of the agent that read it (ReadFor), ""
	// for a reader of the whole group (status), which no node's rule
	// holds.
	Local string
	// Behind are the nodes of the group that count, have not converged on
	// the desired SHA, and do not go last themselves (their record's
	// Consul node is not in Passing), sorted; the reader's own node is
	// left out.
	Behind []string
	// Err says why it could not be read: a node that may be the leader
	// holds.
	Err string
}

// GoesLast says node, on Consul node consulNode, is one that goes last.
func (l *LastState) GoesLast(consulNode string) bool {
	return l != nil && consulNode != "" && slices.Contains(l.Passing, consulNode)
}

// lastRule holds the node the check of update.last passes on (the Raft or
// Swarm leader) while any other node of its group that counts is behind,
// so leadership moves once, at the end. Like block_on_node, each agent
// judges it for its own Consul node, at its look and every OrderRecheck
// while it waits: if leadership moves mid-rollout, the new leader holds
// from its next look, and the old one, now a follower, may go. A reader
// of the whole group (status) is not held by it: it lists the nodes that
// wait (GroupState.LastWaiters).
type lastRule struct{}

func (lastRule) State() GateState { return GateWaitingToGoLast }

func (lastRule) Close(in GateInput) (Closed, bool) {
	g := in.Group
	if g.Spec == nil || g.Spec.Update.Last == nil || g.Last == nil || g.Last.Local == "" {
		return Closed{}, false
	}
	l := g.Last
	c := Closed{Opens: "every other node converging opens the gate", Hold: true, Recheck: in.Now.Add(OrderRecheck), Poll: true}
	switch {
	case l.Err != "":
		c.Reason = fmt.Sprintf("cannot read Consul check %q for update.last: %s", l.Check, l.Err)
	case !l.GoesLast(l.Local):
		return Closed{}, false
	case len(l.Behind) > 0:
		c.Reason = fmt.Sprintf("waits to go last (check %q passes on its Consul node %s): not converged yet: %s",
			l.Check, l.Local, listed(slices.Clone(l.Behind)))
	default:
		return Closed{}, false
	}
	return c, true
}

// LastWaiters are the nodes that wait to go last, for a reader of the
// whole group: those the check of update.last passes on, not converged,
// while another node is behind.
func (g *GroupState) LastWaiters() []string {
	if g.Last == nil || len(g.Last.Behind) == 0 {
		return nil
	}
	var out []string
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if g.Last.GoesLast(n.ConsulNode) && standing(g.Desired, n) != StandingConverged {
			out = append(out, n.Node)
		}
	}
	return out
}
