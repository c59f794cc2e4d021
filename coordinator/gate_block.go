package coordinator

import (
	"fmt"
	"time"

	"github.com/rollagent/rollagent/hashspec"
)

// GateBlockedByCheck: a Consul check the desired spec blocks on
// (update.block_on, or update.block_on_node on the evaluating node) is
// not passing, or could not be read.
const GateBlockedByCheck GateState = "blocked_by_check"

// BlockRecheck is how soon a node blocked by a Consul check looks again:
// a check that flips writes nothing to KV, so no blocking query wakes it.
const BlockRecheck = 5 * time.Second

// GateHealth is the health of the Consul checks the desired spec blocks
// on, as read for the look (Store.BlockHealth).
type GateHealth struct {
	// Failing are the blocks that do not pass, in a fixed order: each
	// with the check that fails it, or none when no check matches it.
	Failing []BlockFailure
	// Err says why the health could not be read: the gate stays closed.
	Err string
	// OnNodes are the update.block_on_node blocks that do not pass, by
	// the Consul node of the group's nodes, as Read (status) reads them:
	// not for the gate, which each agent judges for its own node, but to
	// tell a node they hold from one that is stalled.
	OnNodes map[string][]BlockFailure
	// Index is the Consul index of the read (X-Consul-Index of the
	// health query): every change of a check up to it is in the answer,
	// none after. 0 when nothing was read.
	Index uint64
}

// BlockFailure is a block of the spec that does not pass.
type BlockFailure struct {
	Block hashspec.Block
	// OnNode: the block is one of update.block_on_node.
	OnNode bool
	// Check is the name of the check that does not pass, "" when no
	// check matches the block (a block that matches nothing holds: a
	// misspelt name must not pass for healthy).
	Check   string
	CheckID string // the check's ID on its Consul node
	Status  string // critical or warning
	Node    string // the Consul node the check runs on
	Service string // the check's service, "" for a node's check
	// Since is when an agent of the group first saw the check not
	// passing, in a run of its looks that each saw it so, as the records
	// of nodes the gate holds by it say (NodeState.Blocked, the earliest);
	// zero when none does. Filled for readers of the whole group (status,
	// the exporter), not for an agent's own look, whose record keeps its
	// reason unchanged while the same checks fail.
	Since time.Time
}

func (f BlockFailure) String() string {
	if f.Check == "" {
		where := ""
		if f.OnNode && f.Node != "" {
			where = " on node " + f.Node
		}
		return fmt.Sprintf("blocked by %s: no Consul check matches it%s", f.Block, where)
	}
	s := fmt.Sprintf("blocked by Consul check %q (%s) on node %s", f.Check, f.Status, f.Node)
	if f.Service != "" {
		s += ", service " + f.Service
	}
	if !f.Since.IsZero() {
		s += ", since " + f.Since.UTC().Format(time.RFC3339)
	}
	return s
}

// blockRule holds new grants while a Consul check the desired spec blocks
// on is not passing (critical or warning). Consul cannot check a check's
// status in a transaction, so each agent evaluates it at its look and,
// while it waits in line, every few seconds: it holds to within that.
// It is a hold: a node that holds its slot finishes its step.
type blockRule struct{}

func (blockRule) State() GateState { return GateBlockedByCheck }

func (blockRule) Close(in GateInput) (Closed, bool) {
	g := in.Group
	if g.Spec == nil || !g.Spec.Update.Blocks() {
		return Closed{}, false
	}
	c := Closed{Opens: "the checks it blocks on passing opens the gate", Hold: true, Recheck: in.Now.Add(BlockRecheck), Poll: true,
		BeforeStep: true}
	switch h := g.Health; {
	case h == nil:
		c.Reason = "cannot read Consul health for block_on: not read"
	case h.Err != "":
		c.Reason = "cannot read Consul health for block_on: " + h.Err
	case len(h.Failing) > 0:
		c.Reason = h.Failing[0].String()
		if n := len(h.Failing) - 1; n > 0 {
			c.Reason += fmt.Sprintf(" (and %d more)", n)
		}
	default:
		return Closed{}, false
	}
	return c, true
}
