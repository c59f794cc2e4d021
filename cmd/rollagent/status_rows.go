package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// gateLine is the gate's state, why it is closed, and the policy's K,
// which holds while the gate is closed too.
func gateLine(g gateJSON) string {
	gate := "open"
	if !g.Open {
		gate = fmt.Sprintf("CLOSED (%s): %s", g.State, cell(g.Reason))
	}
	line := fmt.Sprintf("gate %s  max_parallel %s", gate, policyText(g.MaxParallelPolicy, g.MaxParallel, g.Nodes))
	if strings.HasSuffix(g.MaxFailuresPolicy, "%") {
		line += "  max_failures " + policyText(g.MaxFailuresPolicy, g.MaxFailures, g.Nodes)
	}
	return line
}

// policyText is a count as it is, and a percentage with the number it
// means now: "25% (= 2 of 8 nodes)".
func policyText(policy string, now, nodes int) string {
	if !strings.HasSuffix(policy, "%") {
		return fmt.Sprint(now)
	}
	return fmt.Sprintf("%s (= %d of %d nodes)", policy, now, nodes)
}

// mayFinish says what a node that passed a fence toward a cancelled SHA
// may still do: finish the step that fence let through, or, verifying,
// converge on the SHA (a step's end needs its slot, not an open gate).
func mayFinish(state coordinator.NodeStatus, step string) string {
	if state == coordinator.StateVerifying || step == "" {
		return "is verifying its new workload and may still converge on it"
	}
	return fmt.Sprintf("had passed its fence before the CANCEL and may still finish its step %q", cell(step))
}

// progressLine counts the nodes that count, converged first, then every
// other standing that has a node, so that the counts add up to the rows:
// a lost node is named apart, as it no longer counts.
func progressLine(p progressJSON) string {
	parts := []string{fmt.Sprintf("%s %d/%d converged", bar(p.Converged, p.Total, 24), p.Converged, p.Total)}
	for _, st := range coordinator.Standings {
		n := p.ByState[st]
		switch {
		case st == coordinator.StandingConverged || n == 0:
		case st == coordinator.StandingLost:
			parts = append(parts, fmt.Sprintf("%d lost (not counted)", n))
		default:
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if p.Done {
		parts = append(parts, "done")
	} else if e := p.ETA.String(); e != "" {
		parts = append(parts, e)
	}
	return strings.Join(parts, "  ")
}

// stateCell is how status counts a node, with what its agent published
// when that differs, and whether Consul's catalog still has it.
func stateCell(n nodeJSON) string {
	s := string(n.CountedAs)
	switch {
	case n.CountedAs == coordinator.StandingInvalid:
	case n.CountedAs == coordinator.StandingLost:
		s += " (was " + cell(string(n.State)) + ", gone from Consul)"
	case string(n.CountedAs) != string(n.State):
		s += " (says " + cell(string(n.State)) + ")"
	}
	if n.Consul == coordinator.PresenceGone && n.CountedAs != coordinator.StandingLost {
		s += ", gone from Consul"
	}
	return s
}

func agoPtr(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return ago(*t, now)
}
