package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// budgetJSON is who uses max_parallel's slots: the nodes the head of the
// line counts before it grants one.
type budgetJSON struct {
	Full   bool           `json:"full"`
	UsedBy []slotUserJSON `json:"used_by"`
}

type slotUserJSON struct {
	Node string                    `json:"node"`
	Why  coordinator.SlotUseReason `json:"why"`
	// Down says why a node that is unavailable is down.
	Down coordinator.DownReason `json:"down,omitempty"`
}

// stallJSON says why a group whose gate is open does not move.
type stallJSON struct {
	QuietSince time.Time         `json:"quiet_since"`
	Waiting    []waiterJSON      `json:"waiting"`
	Reasons    []stallReasonJSON `json:"reasons"`
}

type waiterJSON struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
}

type stallReasonJSON struct {
	Cause coordinator.StallCause `json:"cause"`
	Nodes []string               `json:"nodes"`
}

// diagnose fills the slot budget and the stall diagnosis of s from gs.
func diagnose(s *statusJSON, gs *coordinator.GroupState, sum coordinator.Summary, now time.Time) {
	b := coordinator.SlotBudget(sum.Gate.Limit, gs.Holders, gs.Unavailable)
	s.Budget = budgetJSON{Full: b.Full(), UsedBy: []slotUserJSON{}}
	for _, u := range b.Users {
		s.Budget.UsedBy = append(s.Budget.UsedBy, slotUserJSON{Node: u.Node, Why: u.Why, Down: gs.DownWhy[u.Node]})
	}
	s.DomainWaits = domainWaits(gs, b, sum)
	st := coordinator.Diagnose(gs.StallInput(now, sum))
	if st == nil {
		return
	}
	s.Stall = &stallJSON{QuietSince: st.Quiet, Waiting: []waiterJSON{}, Reasons: []stallReasonJSON{}}
	for _, w := range st.Waiting {
		s.Stall.Waiting = append(s.Stall.Waiting, waiterJSON{Node: w.Node, Since: w.Since})
	}
	for _, r := range st.Reasons {
		s.Stall.Reasons = append(s.Stall.Reasons, stallReasonJSON{Cause: r.Cause, Nodes: r.Nodes})
	}
}

// stalledAt says whether gs, whose Summary at now is sum, is stalled.
func stalledAt(gs *coordinator.GroupState, sum coordinator.Summary, now time.Time) bool {
	return coordinator.Diagnose(gs.StallInput(now, sum)) != nil
}

// printBudget names, in one line, every node that uses a slot and why,
// once the slots are full and not only by holders at work: then a node
// waits on nodes that do nothing, and the operator must see which.
func printBudget(out io.Writer, s statusJSON) {
	b := s.Budget
	if !s.Gate.Open || !b.Full {
		return
	}
	idle := false
	parts := make([]string, 0, len(b.UsedBy))
	for _, u := range b.UsedBy {
		parts = append(parts, cell(u.Node)+" "+slotUseText(u))
		idle = idle || u.Why != coordinator.SlotHolding
	}
	if idle {
		fmt.Fprintf(out, "slots full (%d of max_parallel %d): %s\n", len(b.UsedBy), s.Gate.MaxParallel, strings.Join(parts, "; "))
	}
}

func slotUseText(u slotUserJSON) string {
	switch u.Why {
	case coordinator.SlotHolding:
		return "holds one"
	case coordinator.SlotOrphaned:
		return "holds one with its agent gone (orphaned claim)"
	case coordinator.SlotUnavailable:
		return "is down (" + downText(u.Down) + ")"
	}
	return string(u.Why)
}

// downTexts say why Consul's state makes a node count as down.
var downTexts = map[coordinator.DownReason]string{
	coordinator.DownHost:         "host down: serfHealth critical on its Consul node",
	coordinator.DownAgentStopped: "agent stopped: nothing vouches for its workload until its agent is back, or `rollagent node rm` removes it",
	coordinator.DownAgent:        "its agent does not answer",
	coordinator.DownWorkload: "workload down: its workload check is not passing (where its agent passes that check itself, " +
		"as with --health-addr=off, a stopped agent shows as this too)",
}

func downText(why coordinator.DownReason) string {
	return textOr(downTexts, why, "its agent does not answer, or its host is gone")
}

// wayOutTexts say how a node down for a reason stops counting against
// max_parallel, for group %[1]s and node %[2]s: an operator must never be
// left with a rollout held by a node and no way to release it.
var wayOutTexts = map[coordinator.DownReason]string{
	coordinator.DownHost: "bring its host back, or, if the node left the group, `consul force-leave -prune` its host " +
		"and `rollagent node rm %[1]s %[2]s --force`",
	coordinator.DownAgentStopped: "start its agent, or `rollagent node rm %[1]s %[2]s` if the node left the group",
	coordinator.DownAgent:        "restart its agent, or `rollagent node rm %[1]s %[2]s --force` if the node left the group",
	coordinator.DownWorkload: "its agent replaces it under its own slot while the gate is open; if the agent is stopped, " +
		"start it, or `rollagent node rm %[1]s %[2]s --force` if the node left the group",
}

func wayOut(why coordinator.DownReason, group, node string) string {
	return fmt.Sprintf(textOr(wayOutTexts, why, wayOutTexts[coordinator.DownAgent]), group, node)
}

// textOr is the text of k, or otherwise for a value of a newer version.
func textOr[K comparable](texts map[K]string, k K, otherwise string) string {
	if s, ok := texts[k]; ok {
		return s
	}
	return otherwise
}

// printStall says that the group is stalled, which nodes wait, and what
// KV tells of why: one line, then one per likely cause.
func printStall(out io.Writer, s statusJSON) {
	st := s.Stall
	if st == nil || len(st.Waiting) == 0 {
		return
	}
	names := make([]string, 0, len(st.Waiting))
	for _, w := range st.Waiting {
		names = append(names, cell(w.Node))
	}
	longest := s.At.Sub(st.Waiting[0].Since).Round(time.Second)
	fmt.Fprintf(out, "STALLED: %s wait%s (longest %s) with the gate open and a slot free; nothing has changed for %s\n",
		strings.Join(names, ", "), plural(len(names)), longest, s.At.Sub(st.QuietSince).Round(time.Second))
	for _, r := range st.Reasons {
		nodes := make([]string, 0, len(r.Nodes))
		for _, n := range r.Nodes {
			nodes = append(nodes, cell(n))
		}
		fmt.Fprintf(out, "  why %s: %s\n", strings.Join(nodes, ", "), causeText(r.Cause))
	}
}

// plural is the verb's "s" for a single node ("n2 waits").
func plural(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}

var causeTexts = map[coordinator.StallCause]string{
	coordinator.CauseHostDown:         "its host is down (serfHealth critical), and it is not in line: bring the host back, or `consul force-leave -prune` it and `rollagent node rm` it if it left the group",
	coordinator.CauseAgentStopped:     "its agent stopped cleanly and is not back: start the agent, or `rollagent node rm` it if the node left the group",
	coordinator.CauseAgentDown:        "Consul sees the agent down, and it is not in line (no contender key): start the agent, or `rollagent node rm` it if the node left the group",
	coordinator.CauseNodeCheck:        "a Consul check on its Consul node holds it (its record names the check): one of update.block_on_node not passing, and the rollout goes on there once it passes; or the check of update.last passing, and it goes once every other node has converged",
	coordinator.CauseAwaitingCanaries: "held by the canary stage (update.canary), not promoted, whose canaries have not all converged (see their rows: failed, down or behind): `rollagent promote` lets the rest go, or commit a new spec",
	coordinator.CauseNotInLine:        "not in line (no contender key, so no live session): the agent is likely down or cut off from Consul; start it, or `rollagent node rm` it if the node left the group",
	coordinator.CauseDomainFull:       "in line, held by update.max_parallel_per: nodes of its domain are down (see the `waits:` line); it goes on once one is back, or is removed with `rollagent node rm`",
	coordinator.CauseBehindDomainFull: "in line behind a node whose domain is full (update.max_parallel_per): the line is first come, first served",
	coordinator.CauseNotGranted:       "in line with a slot free, yet never granted: a bug in rollagent; please report it with `rollagent status -o json` and the agents' logs",
}

func causeText(c coordinator.StallCause) string { return textOr(causeTexts, c, string(c)) }
