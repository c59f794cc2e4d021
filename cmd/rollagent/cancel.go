package main

import (
	"context"
	"fmt"
	"io"
)

// CancelCmd persists a CANCEL for the desired SHA.
type CancelCmd struct {
	Group  string `arg:"" help:"Group name."`
	SHA    string `name:"sha" help:"Cancel only if this is still the desired SHA."`
	Reason string `help:"Why, for status and the records."`
}

// Run writes the CANCEL.
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
	if recorded {
		_, err = fmt.Fprintf(out, "a CANCEL of %s of group %s is recorded (an earlier try's answer was lost, or someone cancelled meanwhile); nothing moves for it until a new spec is committed\n", res.SHA, c.Group)
		return err
	}
	if res.AlreadyCancelled {
		_, err = fmt.Fprintf(out, "%s of group %s was already cancelled\n", res.SHA, c.Group)
		return err
	}
	_, err = fmt.Fprintf(out, "cancelled %s of group %s; nothing moves for it until a new spec is committed\n", res.SHA, c.Group)
	return err
}
