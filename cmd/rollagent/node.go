package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/wallclock"
)

// NodeCmd groups the commands on one node of a group.
type NodeCmd struct {
	Rm NodeRmCmd `cmd:"" help:"Remove a node's record from a group: for a node that left for good."`
}

// NodeRmCmd removes a node's record.
type NodeRmCmd struct {
	Group  string `arg:"" help:"Group name."`
	Node   string `arg:"" help:"Node name."`
	Force  bool   `help:"Remove it even though Consul shows it alive (registered, in line or holding a slot)."`
	Reason string `help:"Why, for the records."`
}

// Run removes the record, refusing a node that looks alive unless --force.
func (c *NodeRmCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	r, err := st.RemoveNode(ctx, c.Group, c.Node, c.Force, who(), c.Reason)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "removed node %s from group %s\n", r.Node, r.Group)
	for _, a := range r.Alive {
		fmt.Fprintf(out, "warning: forced although %s; a live agent publishes its record again\n", a)
	}
	if r.Claim != nil {
		fmt.Fprintln(out, claimNote(r, wallclock.Now()))
	}
	return nil
}

// claimNote says what becomes of the removed node's claim on a slot, which
// node rm leaves to lockstep.
func claimNote(r *coordinator.Removal, now time.Time) string {
	if r.Claim.Lost {
		return "its claim on a slot was already reported lost and no longer counts against max_parallel"
	}
	// Any other claim counts: no clock ends one (lockstep.Claim).
	return fmt.Sprintf("its claim on a slot still counts against max_parallel, as the node may be half replaced: "+
		"it ends when the node releases it or, with its agent gone, when a node in line has seen it gone for its lease (%s, so not within %s) and records it lost",
		r.Claim.Until.Sub(r.Claim.Since).Round(time.Second), max(r.Claim.Until.Sub(now), 0).Round(time.Second))
}
