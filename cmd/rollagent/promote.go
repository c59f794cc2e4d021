package main

import (
	"context"
	"fmt"
	"io"
)

// PromoteCmd promotes a rollout past its canaries.
type PromoteCmd struct {
	Group  string `arg:"" help:"Group name."`
	Reason string `help:"Why, for status and the records."`
}

// Run promotes the desired SHA of the group.
func (c *PromoteCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	res, err := st.PromoteBy(ctx, c.Group, c.Reason, who())
	if err != nil {
		return err
	}
	switch {
	case res.Already:
		_, err = fmt.Fprintf(out, "%s of group %s was already promoted; nothing changed\n", res.SHA, c.Group)
	case res.Paused != nil:
		_, err = fmt.Fprintf(out, "promoted %s of group %s past its canaries; the group is %s: nothing moves until rollagent resume %s\n",
			res.SHA, c.Group, res.Paused.Describe(), c.Group)
	default:
		_, err = fmt.Fprintf(out, "promoted %s of group %s past its canaries; the other nodes follow under max_parallel\n", res.SHA, c.Group)
	}
	return err
}
