package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// canaryJSON is the desired SHA's canary stage (update.canary), absent from
// status -o json when its spec has none.
type canaryJSON struct {
	// Nodes are the canaries the commit chose; empty when it found no
	// node, or when its record is missing (Recorded false).
	Nodes    []string `json:"nodes"`
	Recorded bool     `json:"recorded"`
	// Promoted is the operator's promotion, null while there is none
	// (auto-promotion writes no record: see gate.state).
	Promoted    *coordinator.Promotion `json:"promoted"`
	AutoPromote bool                   `json:"auto_promote"`
	// HealthyTimeSeconds is update.canary_healthy_time, 0 without
	// auto_promote.
	HealthyTimeSeconds float64 `json:"healthy_time_seconds"`
}

func newCanaryJSON(gs *coordinator.GroupState) *canaryJSON {
	if gs.Spec == nil || gs.Spec.Update.Canary == 0 {
		return nil
	}
	u := gs.Spec.Update
	c := &canaryJSON{Nodes: []string{}, Promoted: gs.Promoted, AutoPromote: u.AutoPromote, HealthyTimeSeconds: u.CanaryHealthyTime.Std().Seconds()}
	if gs.Canaries != nil {
		c.Recorded, c.Nodes = true, nonNil(gs.Canaries.Nodes)
	}
	return c
}

// printCanary says which nodes are the canaries and what promotes the
// rest: one line, after the gate's.
func printCanary(out io.Writer, s statusJSON) {
	c := s.Canary
	if c == nil {
		return
	}
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = cell(n)
	}
	line := "canaries: " + strings.Join(names, ", ")
	switch {
	case !c.Recorded:
		line = "canaries: none recorded for this SHA (a commit writes them)"
	case len(c.Nodes) == 0:
		line = "canaries: none (no node counted at the commit)"
	}
	switch {
	case c.Promoted != nil:
		line += fmt.Sprintf("; promoted by %s %s", cell(cmpOr(c.Promoted.By, "an operator")), ago(c.Promoted.At, s.At))
	case c.AutoPromote:
		line += fmt.Sprintf("; auto-promote once healthy for %s (each agent judges on its own clock), or rollagent promote %s",
			time.Duration(c.HealthyTimeSeconds*float64(time.Second)), cell(s.Group))
	default:
		line += "; rollagent promote " + cell(s.Group) + " promotes the rest"
	}
	fmt.Fprintln(out, line)
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}
