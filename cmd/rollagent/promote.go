package main

import (
	"context"
	"fmt"
	"io"

	"github.com/rollagent/rollagent/coordinator"
)

// PromoteCmd promotes a rollout past its canaries.
type PromoteCmd struct {
	GroupReason
}

// Run promotes the desired SHA of the group.
func (c *PromoteCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	return g.operate(out, func(st *coordinator.Store, by string) (string, error) {
		res, err := st.PromoteBy(ctx, c.Group, c.Reason, by)
		if err != nil {
			return "", err
		}
		switch {
		case res.Already:
			return fmt.Sprintf("%s of group %s was already promoted; nothing changed", res.SHA, c.Group), nil
		case res.Paused != nil:
			return fmt.Sprintf("promoted %s of group %s past its canaries; the group is %s: nothing moves until rollagent resume %s",
				res.SHA, c.Group, res.Paused.Describe(), c.Group), nil
		}
		return fmt.Sprintf("promoted %s of group %s past its canaries; the other nodes follow under max_parallel", res.SHA, c.Group), nil
	})
}
