package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// historyJSON is `history -o json`: the log oldest first, and the records
// that did not decode.
type historyJSON struct {
	Group    string                    `json:"group"`
	Events   []coordinator.LoggedEvent `json:"events"`
	Problems []string                  `json:"problems"`
}

// events prints the group's log oldest first, newest last: read during an
// incident, the log tells the story in order and its latest line ends up
// next to the prompt.
func (c *HistoryCmd) events(ctx context.Context, st *coordinator.Store, out io.Writer) error {
	log, err := st.Events(ctx, c.Group)
	if err != nil {
		return err
	}
	if c.Output == "json" {
		h := historyJSON{Group: c.Group, Events: log.Events, Problems: log.Problems}
		if h.Events == nil {
			h.Events = []coordinator.LoggedEvent{}
		}
		if h.Problems == nil {
			h.Problems = []string{}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(h)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tEVENT\tBY\tSHA\tNODE\tDETAIL")
	for _, e := range log.Events {
		kind, by := eventWho(e)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format(time.RFC3339), kind, by,
			orDash(coordinator.ShortSHA(e.SHA)), orDash(e.Node), eventDetail(e.Event))
	}
	for _, p := range log.Problems {
		fmt.Fprintf(tw, "problem: %s\n", cell(p))
	}
	if len(log.Events) == 0 && len(log.Problems) == 0 {
		fmt.Fprintf(tw, "no events for group %s (rollagent history --shas lists what was committed)\n", c.Group)
	}
	return tw.Flush()
}

// eventWho is an event's kind and writer as a person should read them:
// as the event says when its part of the log vouches for it; else as what
// it is, a claim of the node whose part it is in ("commit (claim)" by
// "agent:n1 as alice@host"), or of an unknown writer, from before the log
// had a part per writer.
func eventWho(e coordinator.LoggedEvent) (kind, by string) {
	kind, by = string(e.Kind), cell(e.By)
	switch {
	case e.Vouched:
		return kind, by
	case e.Writer.Kind == coordinator.WriterNode:
		return kind + " (claim)", cell(coordinator.AgentBy(e.Writer.Node)) + " as " + by
	}
	return kind, by + " (unverified)"
}

// eventDetail is the SHA an event moved from and its reason.
func eventDetail(e coordinator.Event) string {
	var parts []string
	if e.From != "" {
		parts = append(parts, "from "+coordinator.ShortSHA(e.From))
	}
	// A commit's reason is "commit" unless someone gave one: no news.
	if e.Reason != "" && e.Reason != string(e.Kind) {
		parts = append(parts, cell(e.Reason))
	}
	return strings.Join(parts, ": ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return cell(s)
}
