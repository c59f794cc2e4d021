package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// PauseCmd is an operator's brake on the group that holds until resume,
// through any commit: its record is where an agent's token may not write,
// so no node can lift it.
type PauseCmd struct {
	GroupReason
}

// GroupReason is what an operator's brake on a group names: the group,
// and why, which status and the event log show. Embedded, kong reads its
// fields as the command's own.
type GroupReason struct {
	Group  string `arg:"" help:"Group name."`
	Reason string `help:"Why, for status and the records."`
}

// Run pauses the group.
func (c *PauseCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	return g.operate(out, func(st *coordinator.Store, by string) (string, error) {
		sha, already, err := st.PauseBy(ctx, c.Group, c.Reason, by)
		if err != nil {
			return "", err
		}
		if already {
			return fmt.Sprintf("group %s was already paused; nothing changed", c.Group), nil
		}
		return fmt.Sprintf("paused group %s at %s; nothing moves, whatever is committed, until rollagent resume %s", c.Group, sha, c.Group), nil
	})
}

// ResumeCmd lifts a pause, an operator's or a failure pause.
type ResumeCmd struct {
	Group string `arg:"" help:"Group name."`
}

// Run lifts the pause.
func (c *ResumeCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	return g.operate(out, func(st *coordinator.Store, by string) (string, error) {
		sha, err := st.ResumeBy(ctx, c.Group, by)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("resumed %s of group %s", sha, c.Group), nil
	})
}

// RollbackCmd re-commits an earlier spec.
type RollbackCmd struct {
	Group string `arg:"" help:"Group name."`
	To    string `help:"SHA (or a prefix of 7 or more) to roll back to; default the latest SHA that converged on every node, as failure_action=rollback chooses."`
}

// Run re-commits.
func (c *RollbackCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	return g.operate(out, func(st *coordinator.Store, by string) (string, error) {
		res, err := st.Rollback(ctx, c.Group, c.To, by)
		if err != nil {
			return "", err
		}
		if res.AlreadyDesired {
			return fmt.Sprintf("%s\nalready desired for group %s; nothing changed", res.SHA, c.Group), nil
		}
		return fmt.Sprintf("%s\nrolled back group %s (was %s)", res.SHA, c.Group, res.Previous), nil
	})
}

// operate opens the store, runs op as the person at the keyboard (who)
// and prints the line op returns: the frame of every command that
// changes a group's record on an operator's word and says what it did.
func (g *Globals) operate(out io.Writer, op func(st *coordinator.Store, by string) (string, error)) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	line, err := op(st, who())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, line)
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
