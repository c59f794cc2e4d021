package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/internal/watch"
)

// StatusCmd shows a group's rollout.
type StatusCmd struct {
	Group  string `arg:"" help:"Group name."`
	Watch  bool   `short:"w" help:"Redraw on every change until interrupted."`
	Output string `short:"o" enum:"table,json" default:"table" help:"Output format (table|json)."`
	// The default is coordinator.DefaultLostAfter, through kong's vars
	// (newParser); a test checks it.
	LostAfter time.Duration `name:"lost-after" default:"${lost_after}" help:"How long a node gone from Consul's catalog still counts toward progress, from its last change or its agent's clean stop, whichever is later; then it shows as lost."`

	timeout time.Duration `kong:"-"` // --timeout, which bounds each read of --watch
}

func (c *StatusCmd) options() statusOptions { return statusOptions{LostAfter: c.LostAfter} }

// Run prints the status once, or on every change with --watch.
func (c *StatusCmd) Run(ctx context.Context, g *Globals, out io.Writer) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	st = st.WithLostAfter(c.LostAfter) // update.after and update.last count as the rows do
	c.timeout = g.Timeout
	if !c.Watch {
		gs, err := st.Read(ctx, c.Group, nil)
		if err != nil {
			return err
		}
		withUnavailable(ctx, st, gs)
		return c.print(out, gs, wallclock.Now())
	}
	return c.watch(ctx, st, out)
}

// redrawEvery refreshes the clocks (slot held for, ETA) of a table between
// changes; JSON is only written on a change, or when a stall starts or
// ends, so a script sees real events.
const redrawEvery = time.Second

// watch redraws in place until ctx ends. Reads block in their own goroutine
// so the table keeps ticking while Consul has nothing new to say; an outage
// is shown under the last known state and retried rather than ending the
// watch, since that is exactly when an operator is looking.
func (c *StatusCmd) watch(ctx context.Context, st *coordinator.Store, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	states, errs := make(chan *coordinator.GroupState, 1), make(chan error, 1)
	go c.follow(ctx, st, states, errs)
	tick := time.NewTicker(redrawEvery)
	defer tick.Stop()
	var last *coordinator.GroupState
	var outage outageState
	var stalled timedEvents // what the last document written said
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if !coordinator.IsTransient(err) {
				return err
			}
			outage.fail(err, wallclock.Now())
		case last = <-states:
			outage = outageState{}
		case <-tick.C:
			// A stall starts with no change in KV, only time passing:
			// it is an event a script must see, like a change.
			if last == nil && outage.err == nil || c.Output == "json" && c.timed(last, wallclock.Now()) == stalled {
				continue
			}
		}
		if err := c.redraw(out, last, outage); err != nil {
			return err
		}
		stalled = c.timed(last, wallclock.Now())
	}
}

// timedEvents are what time alone changes in a document: a stall starts,
// a node gone from Consul turns lost.
type timedEvents struct {
	stalled bool
	lost    int
}

func (c *StatusCmd) timed(gs *coordinator.GroupState, now time.Time) timedEvents {
	if gs == nil {
		return timedEvents{}
	}
	sum := gs.Summary(now, c.LostAfter)
	return timedEvents{stalled: stalledAt(gs, sum, now), lost: sum.ByState[coordinator.StandingLost]}
}

// follow sends every new state of the group, retrying transient errors
// with a growing pause, until ctx ends or an error is not transient.
func (c *StatusCmd) follow(ctx context.Context, st *coordinator.Store, states chan<- *coordinator.GroupState, errs chan<- error) {
	// A restarted Consul may have reset its indexes: the read after a
	// failure starts over.
	opts := watch.Options{Backoff: retry.NewSteady(time.Second, 10*time.Second), ResetOnError: true}
	watch.Run(ctx, opts, func(ctx context.Context, index uint64) (uint64, bool, error) {
		gs, err := readGroupWait(ctx, st, c.Group, index, watchWait, c.timeout)
		switch {
		case ctx.Err() != nil:
			return 0, true, nil
		case err != nil:
			select {
			case errs <- err:
			case <-ctx.Done():
			}
			if !coordinator.IsTransient(err) {
				return 0, true, nil
			}
			return 0, false, err
		case gs.Index == index:
			return gs.Index, false, nil // the wait ended with no change
		}
		select {
		case states <- gs:
		case <-ctx.Done():
		}
		return gs.Index, false, nil
	})
}

// withUnavailable adds the nodes Consul sees down, and those registered in
// its catalog, to gs; a failure to ask leaves them out, with a problem that
// says so: then no node is taken for gone.
func withUnavailable(ctx context.Context, st *coordinator.Store, gs *coordinator.GroupState) {
	if down, err := st.Down(ctx, gs.Group); err != nil {
		gs.Problems = append(gs.Problems, "cannot tell which nodes Consul sees down: "+err.Error())
	} else {
		gs.Unavailable, gs.DownWhy = slices.Sorted(maps.Keys(down)), down
	}
	if p := spreadOf(gs); p != nil {
		if d, err := st.Domains(ctx, gs.Group, p.Key); err != nil {
			gs.Problems = append(gs.Problems, "cannot tell the nodes' domains for max_parallel_per: "+err.Error())
		} else {
			gs.Domains = d
		}
	}
	if reg, err := st.Registered(ctx, gs.Group); err != nil {
		gs.Problems = append(gs.Problems, "cannot tell which nodes are gone from Consul's catalog: "+err.Error())
	} else {
		gs.Registered = reg
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (c *StatusCmd) redraw(out io.Writer, gs *coordinator.GroupState, outage outageState) error {
	if c.Output == "json" && outage.err != nil {
		return c.printOutageJSON(out, gs, outage, wallclock.Now())
	}
	if c.Output == "table" {
		fmt.Fprint(out, "\x1b[H\x1b[2J")
	}
	if gs != nil {
		if err := c.print(out, gs, wallclock.Now()); err != nil {
			return err
		}
	}
	if outage.err != nil {
		_, err := fmt.Fprintln(out, outage.line(wallclock.Now()))
		return err
	}
	return nil
}

func (c *StatusCmd) print(out io.Writer, gs *coordinator.GroupState, now time.Time) error {
	s := newStatusJSON(gs, c.options(), now)
	if c.Output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return printTable(out, s)
}

func printTable(out io.Writer, s statusJSON) error {
	if s.Desired == nil {
		// The gate says "nothing committed", or that desired is unreadable:
		// then the problems below say why.
		fmt.Fprintf(out, "group %s: %s\n", s.Group, s.Gate.Reason)
		printProblems(out, s.Problems)
		return nil
	}
	fmt.Fprintf(out, "group %s  desired %s  committed %s by %s\n", s.Group, short(s.Desired.SHA),
		ago(s.Desired.CommittedAt, s.At), cell(s.Desired.Author))
	fmt.Fprintln(out, gateLine(s.Gate))
	for _, f := range s.Gate.PassedFence {
		fmt.Fprintf(out, "  %s %s\n", cell(f.Node), mayFinish(f.State, f.Step))
	}
	printCanary(out, s)
	fmt.Fprintln(out, progressLine(s.Progress))
	for _, w := range s.GoLast {
		fmt.Fprintf(out, "%s waits to go last (check %q passes on it)\n", cell(w.Node), cell(w.Check))
	}
	printDeadline(out, s)
	printStall(out, s)
	for _, h := range s.Holders {
		fmt.Fprintf(out, "slot held by %s for %s\n", cell(h.Name), s.At.Sub(h.Since).Round(time.Second))
	}
	for _, n := range s.Down {
		fmt.Fprintf(out, "node %s is down (%s): it counts against max_parallel; %s\n", cell(n), downText(s.DownWhy[n]),
			wayOut(s.DownWhy[n], cell(s.Group), cell(n)))
	}
	for _, c := range s.Orphans {
		switch {
		case c.Lost:
			fmt.Fprintf(out, "slot of %s: lost (not back by its lease); recorded failed, no longer counts\n", cell(c.Name))
		default: // a claim counts until it is released or reported lost
			fmt.Fprintf(out, "slot held by %s for %s, its agent gone: it counts as down until it is back, or until a node in line that saw it gone for its lease (%s) records it lost\n",
				cell(c.Name), s.At.Sub(c.Since).Round(time.Second), c.Until.Sub(c.Since).Round(time.Second))
		}
	}
	printBudget(out, s)
	printDomainWaits(out, s)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSHA\tSTATE\tSINCE\tERROR")
	for _, n := range s.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(n.Node), short(n.SHA), stateCell(n), agoPtr(n.Since, s.At), cell(n.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Once the group pauses, every node's error says so; the cause is
	// only in the failure records.
	for _, f := range s.Failures {
		fmt.Fprintf(out, "failure on %s %s: %s\n", cell(f.Node), ago(f.At, s.At), cell(f.Error))
	}
	printImageSplits(out, s.ImageSplits)
	printProblems(out, s.Problems)
	return nil
}

// printImageSplits says which nodes run which image under one SHA.
func printImageSplits(out io.Writer, splits []imageSplitJSON) {
	for _, sp := range splits {
		var parts []string
		for _, im := range sp.Images {
			names := make([]string, len(im.Nodes))
			for i, n := range im.Nodes {
				names[i] = cell(n)
			}
			parts = append(parts, fmt.Sprintf("%s on %s", cell(shortImage(im.ImageID)), strings.Join(names, ", ")))
		}
		fmt.Fprintf(out, "SHA %s runs different images (one tag, different content; name the image by digest, name@sha256:..., in the spec): %s\n",
			short(sp.SHA), strings.Join(parts, "; "))
	}
}

// shortImage is an image ID as docker shows it: sha256:, then 12 digits.
func shortImage(id string) string {
	if len(id) > len("sha256:")+12 {
		return id[:len("sha256:")+12]
	}
	return id
}

func printProblems(out io.Writer, problems []string) {
	for _, pr := range problems {
		fmt.Fprintf(out, "problem: %s\n", cell(pr))
	}
}

// cell makes a value read from KV fit one line of a terminal: anyone with
// KV write can put a newline in a node's error, which would break the
// table, or an escape sequence, which the terminal would obey. Control and
// format characters become spaces, and runs of space one.
func cell(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
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
