package main

import (
	"fmt"
	"io"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// printPlan writes the plan for a person: the SHA, the difference, the
// nodes that would move, the gate it would meet now and how long it
// should take.
func printPlan(out io.Writer, p planJSON) error {
	fmt.Fprintln(out, planHead(p))
	if !p.Changes {
		fmt.Fprintln(out, "no changes: a commit of this spec would change nothing")
		printProblems(out, p.Problems)
		return nil
	}
	if len(p.Diff) > 0 {
		fmt.Fprintln(out, "changes:")
	}
	for _, c := range p.Diff {
		fmt.Fprintf(out, "  %s\n", c)
	}
	printPlanNodes(out, p.Nodes)
	fmt.Fprintln(out, planGateLine(p.Gate))
	fmt.Fprintln(out, estimateLine(p.Estimate, p.Gate.Open))
	for _, n := range p.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	if p.Refused != "" {
		fmt.Fprintf(out, "refused: %s\n", p.Refused)
	}
	printProblems(out, p.Problems)
	return nil
}

func planHead(p planJSON) string {
	head := fmt.Sprintf("group %s  plan %s", p.Group, short(p.SHA))
	switch {
	case p.Desired == nil:
		return head + "  (nothing committed yet: this would be the first commit)"
	case !p.Changes:
		return head + "  = desired"
	}
	return head + fmt.Sprintf("  ≠ desired %s", short(p.Desired.SHA))
}

func printPlanNodes(out io.Writer, n planNodesJSON) {
	if n.Total == 0 {
		fmt.Fprintln(out, "nodes: none yet (each node's agent takes the SHA up when it starts)")
		return
	}
	fmt.Fprintf(out, "nodes that would move: %d of %d (%s)\n", len(n.Move), n.Total, n.Order)
	for i, m := range n.Move {
		line := fmt.Sprintf("  %d. %s  from %s, %s", i+1, cell(m.Node), short(m.SHA), m.State)
		if m.Down != "" {
			line += fmt.Sprintf("; down (%s)", downText(m.Down))
		}
		if m.Canary {
			line += "; canary"
		}
		if m.Last != "" {
			line += "; last: " + m.Last
		}
		if m.Domain != "" {
			line += "; " + cell(m.Domain)
		}
		fmt.Fprintln(out, line)
	}
	for _, r := range n.Refused {
		fmt.Fprintf(out, "  %s will not move: a failure of this SHA is recorded for it: %s\n", cell(r.Node), cell(r.Error))
	}
}

func planGateLine(g planGateJSON) string {
	if g.Open {
		line := "gate now: open  max_parallel " + policyText(g.MaxParallelPolicy, g.MaxParallel, g.Nodes)
		if g.MaxParallelPer != nil {
			line += ", " + cell(spreadText(g.MaxParallelPer))
		}
		return line
	}
	line := fmt.Sprintf("gate now: CLOSED (%s): %s", g.State, cell(g.Reason))
	if g.Hold {
		line += " (a hold: new grants wait)"
	}
	return line
}

// estimateLine is the time at the last rollout's pace, from when the
// gate opens: a hold's wait is not in it.
func estimateLine(e *estimateJSON, open bool) string {
	if e == nil {
		return "time: no earlier rollout to estimate from"
	}
	d := func(s float64) string { return time.Duration(s * float64(time.Second)).Round(time.Second).String() }
	when := ""
	if !open {
		when = " once the gate opens"
	}
	spread := ""
	if e.MaxParallelPer != nil {
		spread = ", " + cell(spreadText(e.MaxParallelPer))
	}
	return fmt.Sprintf("time: about %s%s: %d wave(s) of max_parallel %d%s × %s per wave, the pace of the rollout of %s (%d node(s) converged %s after its commit, max_parallel %d)",
		d(e.Seconds), when, e.Waves, e.MaxParallel, spread, d(e.PerWaveSeconds), coordinator.ShortSHA(e.From.SHA), e.From.Nodes, d(e.From.Seconds), e.From.MaxParallel)
}
