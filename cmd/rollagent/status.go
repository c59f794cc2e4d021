package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
)

// StatusCmd shows a group's rollout.
type StatusCmd struct {
	Group  string `arg:"" help:"Group name."`
	Watch  bool   `short:"w" help:"Redraw on every change until interrupted."`
	Output string `short:"o" enum:"table,json" default:"table" help:"Output format (table|json)."`
}

// Run prints the status once, or on every change with --watch.
func (c *StatusCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	var index uint64
	for {
		gs, err := st.Read(ctx, c.Group, &api.QueryOptions{WaitIndex: index, WaitTime: time.Minute})
		if err != nil {
			if c.Watch && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if c.Watch && c.Output == "table" {
			fmt.Fprint(out, "\x1b[H\x1b[2J")
		}
		if err := c.print(out, gs); err != nil || !c.Watch {
			return err
		}
		index = gs.Index
	}
}

func (c *StatusCmd) print(out io.Writer, gs *coordinator.GroupState) error {
	s := newStatusJSON(gs, time.Now())
	if c.Output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return printTable(out, s)
}

func printTable(out io.Writer, s statusJSON) error {
	if s.Desired == nil {
		_, err := fmt.Fprintf(out, "group %s: nothing committed\n", s.Group)
		return err
	}
	fmt.Fprintf(out, "group %s  desired %s  committed %s by %s\n", s.Group, short(s.Desired.SHA),
		ago(s.Desired.CommittedAt, s.At), s.Desired.Author)
	gate := "open"
	if !s.Gate.Open {
		gate = "CLOSED: " + s.Gate.Reason
	}
	fmt.Fprintf(out, "gate %s  max_parallel %d\n", gate, s.Gate.Limit)
	p := s.Progress
	fmt.Fprintf(out, "%s %d/%d converged  %d replacing  %d waiting  %d failed\n",
		bar(p.Converged, p.Total, 24), p.Converged, p.Total, p.Replacing, p.Waiting, p.Failed)
	for _, h := range s.Holders {
		fmt.Fprintf(out, "slot held by %s for %s\n", h.Name, s.At.Sub(h.Since).Round(time.Second))
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSHA\tSTATE\tSINCE\tERROR")
	for _, n := range s.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, short(n.SHA), n.State, ago(n.Since, s.At), n.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, pr := range s.Problems {
		fmt.Fprintf(out, "problem: %s\n", pr)
	}
	return nil
}

func bar(done, total, width int) string {
	if total == 0 {
		return "[" + strings.Repeat("-", width) + "]"
	}
	n := done * width / total
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "]"
}

// short is ShortSHA, with "-" for none, for table cells.
func short(sha string) string {
	if sha == "" {
		return "-"
	}
	return coordinator.ShortSHA(sha)
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String() + " ago"
}

// statusJSON is the documented, stable schema of `status -o json`.
type statusJSON struct {
	Group    string                  `json:"group"`
	At       time.Time               `json:"at"`
	Desired  *coordinator.Desired    `json:"desired"`
	Gate     coordinator.Verdict     `json:"gate"`
	Progress coordinator.Progress    `json:"progress"`
	Nodes    []coordinator.NodeState `json:"nodes"`
	Holders  []holderJSON            `json:"holders"`
	Waiting  int                     `json:"waiting_for_slot"`
	Failures []coordinator.Failure   `json:"failures"`
	Problems []string                `json:"problems"`
}

type holderJSON struct {
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
}

func newStatusJSON(gs *coordinator.GroupState, now time.Time) statusJSON {
	s := statusJSON{Group: gs.Group, At: now, Desired: gs.Desired, Gate: gs.Gate(), Progress: gs.Progress(),
		Nodes: gs.Nodes, Failures: gs.Failures, Problems: gs.Problems}
	if gs.Holders != nil {
		for _, h := range gs.Holders.Holding {
			s.Holders = append(s.Holders, holderJSON{Name: h.Name, Since: h.Since})
		}
		sort.Slice(s.Holders, func(i, j int) bool { return s.Holders[i].Name < s.Holders[j].Name })
		s.Waiting = len(gs.Holders.Waiting)
	}
	return s
}
