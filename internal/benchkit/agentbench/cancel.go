package agentbench

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

const (
	cancelAgents    = 10
	cancelTries     = 5
	cancelHookSleep = 3 * time.Second
)

// cancelTimes is one try, each measured from `rollagent cancel` returning.
type cancelTimes struct {
	cli      time.Duration // the CLI's own run, start to exit
	seen     time.Duration // the CANCEL key visible to a watcher (negative: before the CLI exited)
	dequeued time.Duration // every waiter's contender key gone
	states   time.Duration // every waiter's node state "cancelled"
	waiters  int
}

// Cancel runs 10 agents, starts a rollout at max_parallel=1
// whose replacements take cancelHookSleep, and once one node holds the slot
// and the other nine wait in line, runs `rollagent cancel`. It times the
// CLI's return to every waiter having left the line (its contender key
// gone: it no longer contends) and to every waiter publishing "cancelled",
// and checks from the records that nothing started after the CANCEL.
func Cancel(b *testing.B) {
	srv := consultest.NewDev(b)
	ba := newAgents(b, srv.Client(), "cancel", cancelHookSleep)
	ns := nodes(cancelAgents)
	for _, n := range ns {
		ba.start(n, srv.HTTPAddr)
	}
	v0 := ba.commit("v0", cancelAgents)
	fleettest.WaitFor(b, 2*time.Minute, "first install on every node", func() bool { return ba.converged(ns, v0) })
	var tries []cancelTimes
	for i := range cancelTries {
		ct := cancelTry(b, ba, srv, ns, fmt.Sprintf("v%d", i+1))
		b.Logf("try %d: %d waiters; cli %s; from its exit: cancel seen %s, all dequeued %s, all states %s",
			i, ct.waiters, ct.cli.Round(time.Millisecond), ct.seen.Round(time.Millisecond),
			ct.dequeued.Round(time.Millisecond), ct.states.Round(time.Millisecond))
		tries = append(tries, ct)
	}
	pick := func(f func(cancelTimes) time.Duration) []time.Duration {
		var out []time.Duration
		for _, t := range tries {
			out = append(out, f(t))
		}
		return out
	}
	deq, _, deqMax := benchkit.DurStats(pick(func(t cancelTimes) time.Duration { return t.dequeued }))
	st, _, stMax := benchkit.DurStats(pick(func(t cancelTimes) time.Duration { return t.states }))
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(deq)/1e6, "dequeued-p50-ms")
	b.ReportMetric(float64(deqMax)/1e6, "dequeued-max-ms")
	b.ReportMetric(float64(st)/1e6, "cancelled-state-p50-ms")
	b.ReportMetric(float64(stMax)/1e6, "cancelled-state-max-ms")
	publish(b, "cancel", cancelMarkdown(tries, pick))
}

// cancelTry commits release, waits for one holder in its step and every
// other node in line, cancels with the CLI and measures; it returns once
// the holder has finished its step, so that the next try starts clean.
func cancelTry(b *testing.B, ba *agents, srv *consultest.Server, ns []string, release string) cancelTimes {
	b.Helper()
	sha := ba.commit(release, 1)
	var holder string
	fleettest.WaitFor(b, time.Minute, "one holder in its step and the others in line", func() bool {
		gs, bs := ba.state(), ba.beginsOf(ns, sha)
		if gs == nil || gs.Holders == nil || len(bs) != 1 {
			return false
		}
		holder = bs[0].node
		return len(gs.Holders.Holding) == 1 && len(gs.Holders.Waiting) == len(ns)-1
	})
	waiters := slices.DeleteFunc(slices.Clone(ns), func(n string) bool { return n == holder })
	w := watchGroup(b, srv.Client(), ba.store, ba.group)
	start := time.Now()
	out, err := exec.Command(ba.bin, "--consul-addr="+srv.HTTPAddr, "cancel", ba.group, "--sha="+sha,
		"--reason=bench").CombinedOutput()
	returned := time.Now()
	if err != nil {
		b.Fatalf("rollagent cancel: %v: %s", err, out)
	}
	ct := cancelTimes{cli: returned.Sub(start), waiters: len(waiters)}
	fleettest.WaitFor(b, 30*time.Second, "every waiter out of line and cancelled", func() bool {
		return w.First(func(s groupSnap) bool { return s.dequeued() && s.allIn(waiters, coordinator.StateCancelled) }) != nil
	})
	fleettest.WaitFor(b, time.Minute, "the holder to finish its step and give its slot back", func() bool { return ba.settled(holder) })
	w.Stop()
	seen := w.First(func(s groupSnap) bool { return s.gs.Cancel != nil })
	ct.seen = seen.at.Sub(returned)
	ct.dequeued = w.First(groupSnap.dequeued).at.Sub(returned)
	ct.states = w.First(func(s groupSnap) bool { return s.allIn(waiters, coordinator.StateCancelled) }).at.Sub(returned)
	checkNothingAfterCancel(b, ba, w, ns, sha, holder, start)
	return ct
}

// settled says node holds no slot and its record is at rest: converged,
// or cancelled (a CANCEL stops every fenced step, its last included, so a
// holder whose workload is healthy ends cancelled, with its slot released).
func (ba *agents) settled(node string) bool {
	gs := ba.state()
	if gs == nil || gs.Holders == nil || len(gs.Holders.Holding) > 0 {
		return false
	}
	for _, n := range gs.Nodes {
		if n.Node == node {
			return n.State == coordinator.StateConverged || n.State == coordinator.StateCancelled
		}
	}
	return false
}

// checkNothingAfterCancel checks the records: no slot granted, no node
// fenced into "replacing" and no failure recorded at a KV index past the
// CANCEL's, and no replace hook begun for sha but the holder's, which began
// before the CLI started.
func checkNothingAfterCancel(b *testing.B, ba *agents, w *groupWatch, ns []string, sha, holder string, start time.Time) {
	b.Helper()
	final := w.Last()
	cancelIndex := final.createIndex(ba.keys().Cancel(sha))
	if cancelIndex == 0 {
		b.Fatalf("no CANCEL of %.12s in the records", sha)
	}
	holding := map[string]bool{}
	for _, s := range w.Snaps() {
		if s.index < cancelIndex {
			for id := range s.gs.Holders.Holding {
				holding[id] = true
			}
			continue
		}
		for id, e := range s.gs.Holders.Holding {
			if !holding[id] {
				b.Errorf("%s was granted a slot at index %d, after the CANCEL at %d", e.Name, s.index, cancelIndex)
			}
		}
		for _, n := range s.gs.Nodes {
			// A fence writes its step into the record; a reclaim of the
			// node's own slot (state replacing, "recovering") is no step.
			if n.Desired == sha && n.Fenced != "" && s.modifyIndex(ba.keys().Node(n.Node)) > cancelIndex {
				b.Errorf("%s fenced into %q at index %d, after the CANCEL at %d", n.Node, n.Fenced, s.modifyIndex(ba.keys().Node(n.Node)), cancelIndex)
			}
		}
	}
	if len(final.gs.Failures) > 0 {
		b.Errorf("failures recorded for %.12s: %+v", sha, final.gs.Failures)
	}
	for _, hb := range ba.beginsOf(ns, sha) {
		if hb.node != holder || !hb.at.Before(start) {
			b.Errorf("%s began replacing to %.12s at %s, the CLI started at %s", hb.node, sha,
				hb.at.Format(time.StampMicro), start.Format(time.StampMicro))
		}
	}
}

func cancelMarkdown(tries []cancelTimes, pick func(func(cancelTimes) time.Duration) []time.Duration) string {
	var sb strings.Builder
	sb.WriteString(header("BenchmarkAgentCancel"))
	fmt.Fprintf(&sb, "%d `rollagent run` processes (exec runtime) on one Consul dev agent; a rollout at max_parallel=1 "+
		"with one node in its %s step and %d in line, then `rollagent cancel`; %d tries. Times are from the CLI "+
		"returning, taken from a blocking-query watch of the group's KV tree (negative: before the CLI had exited).\n\n",
		cancelAgents, cancelHookSleep, cancelAgents-1, len(tries))
	sb.WriteString("| Measured from `rollagent cancel` returning | Median (ms) | Min (ms) | Max (ms) |\n|---|---:|---:|---:|\n")
	rows := []struct {
		what string
		f    func(cancelTimes) time.Duration
	}{
		{"the CLI's own run (start → exit), for scale", func(t cancelTimes) time.Duration { return t.cli }},
		{"CANCEL key visible to the watcher", func(t cancelTimes) time.Duration { return t.seen }},
		{"**every waiter stopped contending** (its contender key `slot/c/<node>/<session>` gone)", func(t cancelTimes) time.Duration { return t.dequeued }},
		{"every waiter's `nodes/<node>` state is `cancelled`", func(t cancelTimes) time.Duration { return t.states }},
	}
	for _, r := range rows {
		med, lo, hi := benchkit.DurStats(pick(r.f))
		fmt.Fprintf(&sb, "| %s | %.1f | %.1f | %.1f |\n", r.what, benchkit.Ms(med), benchkit.Ms(lo), benchkit.Ms(hi))
	}
	sb.WriteString("\nChecked in every try, from the records: no slot granted, no node fenced into `replacing` and no " +
		"failure recorded at a KV index past the CANCEL's CreateIndex, and no replace hook begun for the cancelled " +
		"SHA but the holder's, which began before the CLI started. The holder's replace hook runs to its end; " +
		"its next fence finds the CANCEL, so it releases its slot, cancelled, without dropping the old workload. " +
		"The waiters keep their sessions: as `rollagent run` does by default with Consul on loopback, each agent keeps one, " +
		"bound to a liveness check Consul runs, for as long as it runs.\n")
	return sb.String()
}
