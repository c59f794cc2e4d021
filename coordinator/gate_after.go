package coordinator

import (
	"fmt"
	"slices"
	"time"
)

// GateWaitingForGroup: the desired spec names groups in update.after, and
// one of them has not converged on its own desired SHA.
const GateWaitingForGroup GateState = "waiting_for_group"

// OrderRecheck is how soon a node held by update.after or update.last
// looks again: another group's progress and a check's health write
// nothing to this group's desired, so no blocking query wakes it.
const OrderRecheck = 2 * time.Second

// GroupProgress is how far a group named in update.after is on its own
// desired SHA, as read with the group's state (Store.Read, ReadFor).
type GroupProgress struct {
	Group string
	// SHA is its desired SHA, "" when nothing is committed to it.
	SHA string
	// Converged of Counted nodes run SHA converged; Counted are the nodes
	// that count, as status counts them (a node lost from the catalog no
	// longer does).
	Converged, Counted int
	// After are the groups its own desired spec waits for: one that names
	// the reader is a cycle (two commits that crossed).
	After []string
	// Err says why it could not be read: the gate stays closed.
	Err string
}

// Done says every node of the group that counts runs its desired SHA,
// converged. A group with no node yet is not done: its rollout has not
// begun, and a group that waits for it would move first.
func (p GroupProgress) Done() bool {
	return p.Err == "" && p.SHA != "" && p.Counted > 0 && p.Converged == p.Counted
}

func (p GroupProgress) String() string {
	switch {
	case p.Err != "":
		return fmt.Sprintf("waiting for group %s (cannot read it: %s)", p.Group, p.Err)
	case p.SHA == "":
		return fmt.Sprintf("waiting for group %s (nothing committed)", p.Group)
	}
	return fmt.Sprintf("waiting for group %s (%d of %d converged on %s)", p.Group, p.Converged, p.Counted, ShortSHA(p.SHA))
}

// afterRule holds new grants until every group the desired spec names in
// update.after has converged on its own desired SHA. A group with nothing
// committed holds too (it is not refused at commit): groups are committed
// one at a time, in any order, and a group that does not exist yet is one
// not rolled out yet. Consul cannot count another group's records in a
// transaction, so it holds to within a look, like a check: each agent
// reads the groups with its look and, while it waits, every OrderRecheck.
// A group whose nodes have all converged is not held (GroupState.settled).
type afterRule struct{}

func (afterRule) State() GateState { return GateWaitingForGroup }

func (afterRule) Close(in GateInput) (Closed, bool) {
	g := in.Group
	if g.Spec == nil || len(g.Spec.Update.After) == 0 || g.settled() {
		return Closed{}, false
	}
	c := Closed{Opens: "the groups it waits for converging opens the gate", Hold: true, Recheck: in.Now.Add(OrderRecheck), Poll: true}
	for _, name := range g.Spec.Update.After {
		i := slices.IndexFunc(g.After, func(p GroupProgress) bool { return p.Group == name })
		if i < 0 {
			c.Reason = fmt.Sprintf("waiting for group %s (not read)", name)
			return c, true
		}
		p := g.After[i]
		if p.Done() {
			continue
		}
		c.Reason = p.String()
		if slices.Contains(p.After, g.Group) {
			c.Reason += fmt.Sprintf("; group %s waits for %s too: a cycle, from commits that crossed (commit one of them without it)", name, g.Group)
		}
		return c, true
	}
	return Closed{}, false
}

// settled says every node the reader read has converged on the desired
// SHA, and it read some: a group whose rollout is done is not held when
// a group it waits for takes a new commit (its status stays done), and an
// agent whose node has no record yet (its first look) is held.
func (g *GroupState) settled() bool {
	return len(g.Nodes) > 0 && len(g.Invalid) == 0 && !g.behind()
}
