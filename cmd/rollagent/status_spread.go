package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

// domainWaitJSON is a node that waits for its domain: Used, Max or more,
// are unavailable in it (update.max_parallel_per).
type domainWaitJSON struct {
	Node   string   `json:"node"`
	Domain string   `json:"domain"` // key=value of its Consul node meta
	Used   []string `json:"unavailable"`
	Max    int      `json:"max"`
}

// spreadOf is the desired spec's max_parallel_per, or nil.
func spreadOf(gs *coordinator.GroupState) *hashspec.Spread {
	if gs.Spec == nil {
		return nil
	}
	return gs.Spec.Update.MaxParallelPer
}

// domainWaits lists the waiting nodes whose domain is full by b, while
// the gate is open: the head of the line among them takes no slot.
func domainWaits(gs *coordinator.GroupState, b coordinator.Budget, sum coordinator.Summary) []domainWaitJSON {
	out := []domainWaitJSON{}
	if !sum.Gate.Open {
		return out
	}
	var waiting []string
	for _, r := range sum.Rows {
		if r.Record != nil && r.Record.State == coordinator.StateWaiting {
			waiting = append(waiting, r.Node)
		}
	}
	for _, w := range coordinator.SpreadWaits(spreadOf(gs), b, gs.Holders, gs.Domains, waiting) {
		out = append(out, domainWaitJSON{Node: w.Node, Domain: w.Domain, Used: w.Used, Max: w.Max})
	}
	return out
}

// printDomainWaits says, a line each, which nodes wait for their domain:
// "n4 waits: zone=b has 1 of max 1 unavailable (n2)".
func printDomainWaits(out io.Writer, s statusJSON) {
	for _, w := range s.DomainWaits {
		used := make([]string, 0, len(w.Used))
		for _, n := range w.Used {
			used = append(used, cell(n))
		}
		fmt.Fprintf(out, "%s waits: %s has %d of max %d unavailable (%s)\n", cell(w.Node), cell(w.Domain), len(w.Used), w.Max,
			strings.Join(used, ", "))
	}
}
