package main

import (
	"context"
	"fmt"
	"io"

	"github.com/rollagent/rollagent/coordinator"
)

// CancelCmd persists a CANCEL for the desired SHA.
type CancelCmd struct {
	Group  string `arg:"" help:"Group name."`
	SHA    string `name:"sha" help:"Cancel only if this is still the desired SHA."`
	Reason string `help:"Why, for status and the records."`
}

// Run writes the CANCEL, and says which nodes may still finish a step
// toward the cancelled SHA.
func (c *CancelCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	res, recorded, err := c.cancelRetrying(ctx, st)
	if err != nil {
		return err
	}
	if res.Desired != "" {
		// Cancelled before desired moved on: what moves now is not.
		if !recorded {
			return fmt.Errorf("%s of group %s was cancelled earlier, but it is not the desired SHA any more: %s is, and it is NOT cancelled; nothing cancelled",
				res.SHA, c.Group, res.Desired)
		}
		_, err = fmt.Fprintf(out, "a CANCEL of %s of group %s is recorded (an earlier try's answer was lost, or someone cancelled meanwhile); "+
			"desired has since moved to %s, which is NOT cancelled\n", res.SHA, c.Group, res.Desired)
		return err
	}
	switch {
	case recorded:
		_, err = fmt.Fprintf(out, "a CANCEL of %s of group %s is recorded (an earlier try's answer was lost, or someone cancelled meanwhile); nothing moves for it until a new spec is committed\n", res.SHA, c.Group)
	case res.AlreadyCancelled:
		_, err = fmt.Fprintf(out, "%s of group %s was already cancelled\n", res.SHA, c.Group)
	default:
		_, err = fmt.Fprintf(out, "cancelled %s of group %s; nothing moves for it until a new spec is committed\n", res.SHA, c.Group)
	}
	if err != nil {
		return err
	}
	return c.sayPassedFence(ctx, st, out, res.SHA)
}

// sayPassedFence names the nodes that had passed a fence toward sha
// before its CANCEL and may still finish their step: a CANCEL stops every
// fence after it, not a step whose fence Consul applied before it. The
// CANCEL is recorded whatever this read gives, so a failed read is said,
// not returned.
func (c *CancelCmd) sayPassedFence(ctx context.Context, st *coordinator.Store, out io.Writer, sha string) error {
	gs, err := st.Read(ctx, c.Group, nil)
	if err != nil {
		_, err = fmt.Fprintf(out, "cannot tell which nodes had passed a fence for it (%v); `rollagent status %s` shows them\n", err, c.Group)
		return err
	}
	if gs.Desired == nil || gs.Desired.SHA != sha {
		return nil // desired moved on since: status tells what moves now
	}
	passed := gs.PassedFence()
	if len(passed) == 0 {
		_, err = fmt.Fprintln(out, "no node had passed a fence for it: no step toward it runs")
		return err
	}
	for _, n := range passed {
		fmt.Fprintf(out, "%s %s\n", cell(n.Node), mayFinish(n.State, n.Fenced))
	}
	_, err = fmt.Fprintf(out, "`rollagent status %s` shows them until they are done\n", c.Group)
	return err
}
