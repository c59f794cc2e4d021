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
	PinFlags
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
	image := spec.Container.Image
	if spec, sha, err = c.pin(ctx, spec, sha, g.Timeout); err != nil {
		return fmt.Errorf("%w; nothing committed", err)
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
	done := fmt.Sprintf("committed to group %s", c.Group)
	if res.AlreadyDesired {
		done = fmt.Sprintf("already desired for group %s; nothing changed", c.Group)
	} else {
		log.Debug("committed", "group", c.Group, "sha", sha, "previous", res.Previous)
	}
	if p := res.Paused; p != nil {
		done += fmt.Sprintf("\nthe group is %s; nothing moves until `rollagent resume %s`", cell(p.Describe()), c.Group)
	}
	if _, err = fmt.Fprintf(out, "%s\n%s\n", sha, done); err != nil || image == spec.Container.Image {
		return err
	}
	_, err = fmt.Fprintf(out, "image %s pinned to %s\n", image, spec.Container.Image)
	return err
}
