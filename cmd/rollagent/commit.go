package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/hashspec"
)

// CommitCmd makes a spec the group's desired spec.
type CommitCmd struct {
	Group string `arg:"" help:"Group name."`
	SpecFlags
	Author string `help:"Who commits, for the history (default user@host)."`
}

// Run validates, stores and commits.
func (c *CommitCmd) Run(ctx context.Context, g *Globals, out io.Writer, log hclog.Logger) error {
	if err := hashspec.ValidateName(c.Group); err != nil {
		return fmt.Errorf("group: %w", err) // the error quotes the name, shortened
	}
	spec, sha, err := loadSpec(c.File, c.Format, c.Group)
	if err != nil {
		return err
	}
	st, err := g.store()
	if err != nil {
		return err
	}
	author := c.Author
	if author == "" {
		author = who()
	}
	res, err := st.Commit(ctx, c.Group, spec, author, "commit")
	if err != nil {
		return err
	}
	if res.AlreadyDesired {
		_, err = fmt.Fprintf(out, "%s\nalready desired for group %s; nothing changed\n", sha, c.Group)
		return err
	}
	log.Debug("committed", "group", c.Group, "sha", sha, "previous", res.Previous)
	_, err = fmt.Fprintf(out, "%s\ncommitted to group %s\n", sha, c.Group)
	return err
}
