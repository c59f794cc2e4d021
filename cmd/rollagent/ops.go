package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// PauseCmd is an operator's brake on the group that holds until resume,
// through any commit: its record is where an agent's token may not write,
// so no node can lift it.
type PauseCmd struct {
	Group  string `arg:"" help:"Group name."`
	Reason string `help:"Why, for status and the records."`
}

// Run pauses the group.
func (c *PauseCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	sha, already, err := st.PauseBy(ctx, c.Group, c.Reason, who())
	if err != nil {
		return err
	}
	if already {
		_, err = fmt.Fprintf(out, "group %s was already paused; nothing changed\n", c.Group)
		return err
	}
	_, err = fmt.Fprintf(out, "paused group %s at %s; nothing moves, whatever is committed, until rollagent resume %s\n", c.Group, sha, c.Group)
	return err
}

// ResumeCmd lifts a pause, an operator's or a failure pause.
type ResumeCmd struct {
	Group string `arg:"" help:"Group name."`
}

// Run lifts the pause.
func (c *ResumeCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	sha, err := st.ResumeBy(ctx, c.Group, who())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "resumed %s of group %s\n", sha, c.Group)
	return err
}

// RollbackCmd re-commits an earlier spec.
type RollbackCmd struct {
	Group string `arg:"" help:"Group name."`
	To    string `help:"SHA (or a prefix of 7 or more) to roll back to; default the latest SHA that converged on every node, as failure_action=rollback chooses."`
}

// Run re-commits.
func (c *RollbackCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	res, err := st.Rollback(ctx, c.Group, c.To, who())
	if err != nil {
		return err
	}
	if res.AlreadyDesired {
		_, err = fmt.Fprintf(out, "%s\nalready desired for group %s; nothing changed\n", res.SHA, c.Group)
		return err
	}
	_, err = fmt.Fprintf(out, "%s\nrolled back group %s (was %s)\n", res.SHA, c.Group, res.Previous)
	return err
}

// HistoryCmd shows a group's event log, or with --shas its committed SHAs.
type HistoryCmd struct {
	Group  string `arg:"" help:"Group name."`
	SHAs   bool   `name:"shas" help:"List the committed SHAs instead of the events."`
	Output string `short:"o" enum:"table,json" default:"table" help:"Output format of the events (table|json)."`
}

// Run prints the events, or the SHAs; both oldest first.
func (c *HistoryCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	if !c.SHAs {
		return c.events(ctx, st, out)
	}
	if c.Output != "table" {
		return fmt.Errorf("--shas has no %s output; leave out -o", c.Output)
	}
	gs, err := st.Read(ctx, c.Group, nil)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHA\tCOMMITTED\tAUTHOR\tIMAGE\tNOTE")
	for _, h := range gs.History {
		note := ""
		if gs.Desired != nil && h.SHA == gs.Desired.SHA {
			note = "desired"
		}
		if gs.Cancelled(h.SHA) {
			note += " cancelled"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.SHA[:12], h.CommittedAt.Local().Format(time.RFC3339), cell(h.Author), cell(h.Decoded().Container.Image), note)
	}
	for _, p := range gs.Problems {
		fmt.Fprintf(tw, "problem: %s\n", cell(p))
	}
	return tw.Flush()
}
