package fleetbench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/lockstep"
)

// BenchmarkFleetCancel (issue 30, item 3): cancelWaiters nodes wait in
// line behind cancelK holders held in their step; the coordinator's Cancel,
// which `rollagent cancel` calls, closes the gate. Measured: from Cancel
// returning to the last waiter's contender key gone. Checked from the
// records: no grant at a Consul index past the CANCEL's.
const (
	cancelWaiters = 1000
	cancelK       = 10
	// cancelTarget is the bound on the time to an empty line.
	cancelTarget = 2 * time.Second
)

var (
	mdCancel      = benchkit.Report{Env: "FLEET_BENCH_MD", Name: "fleet bench cancel"}
	cancelCommand = "go test -run '^$' -bench FleetCancel -benchtime 1x -timeout 90m ./agent/"
)

// cancelRun is one run's figures and what its records showed.
type cancelRun struct {
	waiters     int
	cancelCall  time.Duration // Store.Cancel, start to return
	empty       time.Duration // Cancel returned → no waiter's contender key left
	cancelIndex uint64        // the CANCEL's ModifyIndex
	maxGrant    uint64        // the largest CreateIndex of a holder key ever seen
	snaps       int           // slot states the watch saw
	lastJoined  uint64        // the holders record's latest grant: its contender key's CreateIndex
	released    uint64        // slots released from the CANCEL to the end
	steps       int64         // fenced steps passed after the CANCEL
	late        []string      // violations: grants, fences after the CANCEL
	// prevRead is when the watch's last read that still found a waiter
	// returned, after Cancel returned: empty is no finer than empty - prevRead.
	prevRead time.Duration
	// endpoints counts the agents' requests from Cancel's start to the
	// empty line, raft the Raft writes, busy the cores kept busy.
	endpoints map[string]int64
	raft      uint64
	busy      float64
}

// Cancel runs the cancel case FLEET_BENCH_RUNS times and publishes it.
func Cancel(b *testing.B, opts Options) {
	raiseNoFile(b, fleetNoFile)
	runs, started := fleetRuns(b), time.Now()
	fc := fleetCase{n: capN(cancelWaiters, maxN(b)) + cancelK, k: cancelK, healthy: timedHealthy}
	var out []cancelRun
	for run := range runs {
		b.Run(fmt.Sprintf("waiters=%d/K=%d/run=%d", fc.n-fc.k, fc.k, run+1), func(b *testing.B) {
			srv := consultest.New(b, consultest.Options{HCL: fleetHCL})
			cr := runCancel(b, srv, fc, run, opts)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(benchkit.Ms(cr.empty), "line-empty-ms")
			b.ReportMetric(benchkit.Ms(cr.cancelCall), "cancel-call-ms")
			for _, v := range cr.late {
				b.Error(v)
			}
			out = append(out, cr)
		})
	}
	if len(out) > 0 {
		mdCancel.Publish(b, cancelReport(out, runs, started))
	}
}

// runCancel brings the fleet up converged, commits v2 with every
// replacement held in its step, waits for K holders and the rest in line,
// cancels and measures.
func runCancel(b *testing.B, srv *consultest.Server, fc fleetCase, run int, opts Options) cancelRun {
	f := newBenchFleet(b, fleetConsul{srv: srv}, fc, run, opts)
	hold := make(chan struct{})
	f.pace.hold = hold
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // a failed run must not leave the agents in their step
	v1 := f.commit("v1")
	f.startAgents(v1)
	defer f.stopAgents()
	f.converged(v1, 5*time.Minute)
	if err := f.traffic.waitQuiet(time.Second, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	v2 := f.commit("v2")
	keys, err := f.store.Keys(f.group)
	if err != nil {
		b.Fatal(err)
	}
	c := srv.Client()
	fleettest.WaitFor(b, 5*time.Minute, "K holders in their step and every other node in line", func() bool {
		h, err := lockstep.ReadHolders(c, keys.Slot(), nil)
		return err == nil && len(h.Holding) == fc.k && len(h.Waiting) == fc.n-fc.k && f.pace.steps.Load() == int64(fc.k)
	})
	w := watchSlot(b, c, keys.Slot())
	defer w.Stop()
	before := w.Last()
	raft0, err := raftIndex(c)
	if err != nil {
		b.Fatal(err)
	}
	agents0, consul0 := f.fleetCPU()
	start := time.Now()
	f.traffic.record(start)
	if _, err := f.store.Cancel(context.Background(), f.group, v2, "bench", "bench"); err != nil {
		b.Fatal(err)
	}
	returned := time.Now()
	cr := cancelRun{waiters: fc.n - fc.k, cancelCall: returned.Sub(start)}
	steps0 := f.pace.steps.Load()
	holders := before.holderNodes(keys.Slot())
	out := emptyLine(keys.Slot(), holders)
	fleettest.WaitFor(b, time.Minute, "every waiter out of line", func() bool { return w.First(out) != nil })
	empty := w.First(out)
	_, cr.endpoints = f.traffic.stop()
	agents1, consul1 := f.fleetCPU()
	raft1, err := raftIndex(c)
	if err != nil {
		b.Fatal(err)
	}
	cr.raft = raft1 - raft0
	cr.empty = empty.at.Sub(returned)
	cr.busy = ((agents1 - agents0) + (consul1 - consul0)).Seconds() / time.Since(start).Seconds()
	cr.prevRead = lastBefore(w, empty.index).at.Sub(returned)
	release()
	final := awaitReleased(b, c, keys.Slot())
	w.Stop()
	cr.steps = f.pace.steps.Load() - steps0
	cr.check(b, c, keys, v2, append(w.Snaps(), final), before)
	return cr
}

// awaitReleased waits for the holders, let out of their step, to find
// the CANCEL at their next fence and release their slots, and returns the
// slot as the read that saw them released: the watch, stopped, may not
// have returned the last release yet.
func awaitReleased(b *testing.B, c *api.Client, prefix string) slotSnap {
	var final slotSnap
	fleettest.WaitFor(b, 2*time.Minute, "the holders to release their slots", func() bool {
		pairs, meta, err := c.KV().List(prefix, nil)
		if err != nil {
			return false
		}
		h := lockstep.ParseHolders(prefix, pairs)
		if len(h.Holding) > 0 {
			return false
		}
		for _, cl := range h.Claims {
			if !cl.Lost {
				return false
			}
		}
		final = slotSnap{at: time.Now(), index: meta.LastIndex, pairs: pairs}
		return true
	})
	return final
}

// slotSnap is the slot's keys as one blocking read returned them.
type slotSnap struct {
	at    time.Time
	index uint64
	pairs api.KVPairs
}

// rel is the part of a key under the slot's prefix.
func (s slotSnap) rel(p *api.KVPair, prefix string) string { return strings.TrimPrefix(p.Key, prefix) }

// holderNodes are the nodes that hold a key under .holders/.
func (s slotSnap) holderNodes(prefix string) map[string]bool {
	out := map[string]bool{}
	for _, p := range s.pairs {
		if node, holder, ok := entryOf(prefix, p.Key); ok && holder {
			out[node] = true
		}
	}
	return out
}

// entryOf is the node a contender or holder key of the slot at prefix is
// filed under (<dir>/<node>/<session>), and whether it is a holder key.
// lockstep says which keys are entries: its slot keys are filed under
// .holders/ too, and are no grant.
func entryOf(prefix, key string) (node string, holder, ok bool) {
	rel, found := strings.CutPrefix(key, prefix)
	if !found || lockstep.ClassifyKey(rel) != lockstep.KeyEntry {
		return "", false, false
	}
	parts := strings.Split(rel, "/")
	node = parts[1]
	return node, strings.HasPrefix(key, lockstep.HolderKey(prefix, node, "")), true
}

// emptyLine says no contender key is left but the holders'.
func emptyLine(prefix string, holders map[string]bool) func(slotSnap) bool {
	return func(s slotSnap) bool {
		for _, p := range s.pairs {
			if node, holder, ok := entryOf(prefix, p.Key); ok && !holder && !holders[node] {
				return false
			}
		}
		return true
	}
}

// slotWatch records every state of the slot's keys, with the time a
// blocking read returned it.
type slotWatch = benchkit.KVWatch[slotSnap]

func watchSlot(b *testing.B, c *api.Client, prefix string) *slotWatch {
	b.Helper()
	return benchkit.WatchKV(b, c, prefix, 0, func(at time.Time, index uint64, pairs api.KVPairs) slotSnap {
		return slotSnap{at: at, index: index, pairs: pairs}
	})
}

// lastBefore is the last state read before index.
func lastBefore(w *slotWatch, index uint64) slotSnap {
	all := w.Snaps()
	prev := all[0]
	for _, s := range all {
		if s.index < index {
			prev = s
		}
	}
	return prev
}

// holdersRecord is the part of lockstep's holders record (docs/kv-layout.md)
// the check reads: the latest grant, which lockstep's view leaves out.
type holdersRecord struct {
	Last *struct {
		Session string `json:"session"`
		Joined  uint64 `json:"joined"`
	} `json:"last"`
}

func (s slotSnap) record(prefix string) holdersRecord {
	var rec holdersRecord
	for _, p := range s.pairs {
		if p.Key == lockstep.HoldersKey(prefix) {
			_ = json.Unmarshal(p.Value, &rec)
		}
	}
	return rec
}

// check proves from the records that nothing was granted after the
// CANCEL: every holder key the watch or the read after the releases
// saw was created at or before the CANCEL's index, and no key was there
// that lockstep's layout does not name; the holders record's latest grant
// is one made before it; the slots released since are the holders' at the CANCEL, no more; no
// node record written after the CANCEL names a fenced step; and no
// runtime passed a fenced step after it.
func (cr *cancelRun) check(b *testing.B, c *api.Client, keys coordinator.Keys, sha string, all []slotSnap, before slotSnap) {
	b.Helper()
	p, _, err := c.KV().Get(keys.Cancel(sha), nil)
	if err != nil || p == nil {
		b.Fatalf("no CANCEL of %.12s in the records: %v", sha, err)
	}
	cr.cancelIndex = p.ModifyIndex
	prefix := keys.Slot()
	cr.snaps = len(all) - 1 // the last is finalSlot's read
	for _, s := range all {
		for _, kv := range s.pairs {
			if kind := lockstep.ClassifyKey(strings.TrimPrefix(kv.Key, prefix)); kind == lockstep.KeyLegacyEntry || kind == lockstep.KeyUnexpected {
				// A key the checks below do not read could hide a grant.
				cr.late = append(cr.late, fmt.Sprintf("%s: a key this check cannot account for", s.rel(kv, prefix)))
			}
			if _, holder, ok := entryOf(prefix, kv.Key); ok && holder {
				cr.maxGrant = max(cr.maxGrant, kv.CreateIndex)
				if kv.CreateIndex > cr.cancelIndex {
					cr.late = append(cr.late, fmt.Sprintf("%s granted at index %d, after the CANCEL at %d", s.rel(kv, prefix), kv.CreateIndex, cr.cancelIndex))
				}
			}
		}
	}
	rec0, rec1 := before.record(prefix), all[len(all)-1].record(prefix)
	if rec1.Last != nil {
		cr.lastJoined = rec1.Last.Joined
	}
	if rec0.Last == nil || rec1.Last == nil || *rec0.Last != *rec1.Last {
		cr.late = append(cr.late, fmt.Sprintf("the holders record's latest grant moved after the CANCEL: %+v → %+v", rec0.Last, rec1.Last))
	}
	// The slots freed are counted in the record and in each slot key:
	// lockstep's view sums them. No holder dies here, so none of them is
	// also marked lost: each held slot is freed once.
	cr.released = lockstep.ParseHolders(prefix, all[len(all)-1].pairs).Released - lockstep.ParseHolders(prefix, before.pairs).Released
	if held := uint64(len(before.holderNodes(prefix))); cr.released != held {
		cr.late = append(cr.late, fmt.Sprintf("%d slots released after the CANCEL, %d were held at it", cr.released, held))
	}
	if cr.steps != 0 {
		cr.late = append(cr.late, fmt.Sprintf("%d fenced steps passed after the CANCEL", cr.steps))
	}
	cr.checkNodes(b, c, keys, sha)
}

// checkNodes reads every node record: none written after the CANCEL may
// name a fenced step toward sha.
func (cr *cancelRun) checkNodes(b *testing.B, c *api.Client, keys coordinator.Keys, sha string) {
	pairs, _, err := c.KV().List(keys.NodesPrefix(), nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range pairs {
		var n coordinator.NodeState
		if json.Unmarshal(p.Value, &n) != nil {
			continue
		}
		if p.ModifyIndex > cr.cancelIndex && n.Desired == sha && n.Fenced != "" {
			cr.late = append(cr.late, fmt.Sprintf("%s fenced into %q at index %d, after the CANCEL at %d", n.Node, n.Fenced, p.ModifyIndex, cr.cancelIndex))
		}
	}
}

func cancelReport(runs []cancelRun, n int, started time.Time) string {
	var sb strings.Builder
	cmd := mdCancel.Command(cancelCommand)
	if n > 1 {
		cmd = fmt.Sprintf("%s=%d %s", fleetRunsEnv, n, cmd)
	}
	sb.WriteString(benchkit.Generated(cmd, started, true))
	fmt.Fprintf(&sb, "One Consul %s dev agent, fresh for each run; %d in-process agents as in the fleet bench above, at max_parallel=%d: "+
		"%d hold their slot, kept in their replacement's step, and %d wait in line; then the coordinator's Cancel, which "+
		"`rollagent cancel` calls; %s, GOMAXPROCS=%d. %d run(s).\n\n",
		consultest.Version, runs[0].waiters+cancelK, cancelK, cancelK, runs[0].waiters, benchkit.Platform(), runtime.GOMAXPROCS(0), len(runs))
	sb.WriteString("| Run | Waiters | Cancel call (ms) | **Cancel returned → last waiter out of line (ms)** | Target < 2 s | Previous read, still waiters (ms) | " +
		"Requests per waiter, Cancel → empty line (top 6) | Raft writes | Cores busy | CANCEL's index | Latest holder key's CreateIndex | " +
		"Holders record's latest grant (contender CreateIndex) | Slots released after it | Fenced steps after it | Slot states read | Late grants or fences |\n")
	sb.WriteString("|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for i, r := range runs {
		fmt.Fprintf(&sb, "| %d | %d | %.1f | %.1f | %s | %.1f | %s | %d | %.2f | %d | %d | %d | %d | %d | %d | %s |\n", i+1, r.waiters,
			benchkit.Ms(r.cancelCall), benchkit.Ms(r.empty), r.verdict(), benchkit.Ms(r.prevRead), r.topRequests(6), r.raft, r.busy,
			r.cancelIndex, r.maxGrant, r.lastJoined, r.released, r.steps, r.snaps, r.lateText())
	}
	med := medianRun(runs)
	fmt.Fprintf(&sb, "\nMedian of %d run(s), Cancel returned → last waiter out of line: **%.0f ms** (%s); every run: %s.\n",
		len(runs), benchkit.Ms(med.empty), med.verdict(), everyEmpty(runs))
	sb.WriteString("\nOut of line: the first state of the slot's keys, followed with blocking reads from before the Cancel, in which no " +
		"contender key (`slot/c/<node>/<session>`) is left but the holders'; the time is when that read returned. Checked from the records: " +
		"every holder key (`slot/.holders/<node>/<session>`, created by its grant) any read saw has a CreateIndex at or below the CANCEL's " +
		"ModifyIndex, in the watch's reads and in one read after the holders released, and no key under the slot is one lockstep's layout does not name; the holders record's latest grant (`last`) is the same before the Cancel and at the end; the slots released from " +
		"the Cancel to the end (the `released` counts of the holders record and of each slot key, `slot/.holders/.slots/<i>`, summed as lockstep sums them) are the holders' at the Cancel, no more, so no grant came and went between two reads; " +
		"no node record written after the CANCEL names a fenced step; and no runtime passed a fenced step after it. " +
		"Requests (counted at each agent's client), Raft writes (the leader's last_log_index) and cores busy (agents + Consul, from /proc) " +
		"run from the Cancel's start until the empty line was seen.\n")
	return sb.String()
}

func (r cancelRun) verdict() string {
	if r.empty >= cancelTarget {
		return "**missed**"
	}
	return "met"
}

func (r cancelRun) lateText() string {
	if len(r.late) == 0 {
		return "none"
	}
	return strings.Join(r.late, "; ")
}

// shaInPath is a SHA in a request's path, left out of the table.
var shaInPath = regexp.MustCompile(`[0-9a-f]{64}`)

// topRequests is the n commonest requests, per waiter.
func (r cancelRun) topRequests(n int) string {
	names := slices.SortedFunc(maps.Keys(r.endpoints), func(a, b string) int { return cmp.Compare(r.endpoints[b], r.endpoints[a]) })
	var parts []string
	for _, name := range names[:min(n, len(names))] {
		short := shaInPath.ReplaceAllString(name, "<sha>")
		parts = append(parts, fmt.Sprintf("%s %.2f", short, float64(r.endpoints[name])/float64(max(r.waiters, 1))))
	}
	return strings.Join(parts, "; ")
}

// medianRun is the run with the median time to an empty line (the slower
// of the middle two for an even count).
func medianRun(runs []cancelRun) cancelRun {
	sorted := slices.SortedFunc(slices.Values(runs), func(a, b cancelRun) int { return cmp.Compare(a.empty, b.empty) })
	return sorted[len(sorted)/2]
}

func everyEmpty(runs []cancelRun) string {
	var ms []string
	for _, r := range slices.SortedFunc(slices.Values(runs), func(a, b cancelRun) int { return cmp.Compare(a.empty, b.empty) }) {
		ms = append(ms, fmt.Sprintf("%.0f ms", benchkit.Ms(r.empty)))
	}
	return strings.Join(ms, ", ")
}
