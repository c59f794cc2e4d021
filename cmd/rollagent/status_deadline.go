package main

import (
	"fmt"
	"io"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// deadlineJSON is the desired commit's progress deadline
// (update.progress_deadline), null in the document when the spec has none.
type deadlineJSON struct {
	// After is the deadline, as a Go duration ("10m0s").
	After string `json:"after"`
	// LastProgress is the later of the commit and the last time a node's
	// record turned converged on the desired SHA (its since): what the
	// agents count from, though only while the gate is open.
	LastProgress time.Time `json:"last_progress"`
	// Passed says the deadline's record exists for this commit; At, Node,
	// Action and Reason are its.
	Passed bool       `json:"passed"`
	At     *time.Time `json:"at"`
	Node   string     `json:"node,omitempty"`
	Action string     `json:"action,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

// progressDeadline is gs's deadline as the document shows it, nil when
// its spec has none.
func progressDeadline(gs *coordinator.GroupState) *deadlineJSON {
	if gs.Desired == nil || gs.Spec == nil || gs.Spec.Update.ProgressDeadline == 0 {
		return nil
	}
	d := &deadlineJSON{After: time.Duration(gs.Spec.Update.ProgressDeadline).String(), LastProgress: gs.Desired.CommittedAt}
	for _, n := range gs.Nodes {
		if n.SHA == gs.Desired.SHA && n.State.Verified() && n.Since.After(d.LastProgress) {
			d.LastProgress = n.Since
		}
	}
	if r := gs.Deadline; r != nil {
		at := r.At
		d.Passed, d.At, d.Node, d.Action, d.Reason = true, &at, r.Node, r.Action, r.Reason
	}
	return d
}

// printDeadline says where the progress deadline stands, one line.
func printDeadline(out io.Writer, s statusJSON) {
	d := s.Deadline
	switch {
	case d == nil || s.Progress.Done:
	case d.Passed:
		fmt.Fprintf(out, "progress deadline passed %s (seen by %s): %s; failure_action=%s\n", agoPtr(d.At, s.At), cell(d.Node), cell(d.Reason), cell(d.Action))
	default:
		fmt.Fprintf(out, "progress deadline %s: last progress %s (the agents count only while the gate is open)\n", d.After, ago(d.LastProgress, s.At))
	}
}
