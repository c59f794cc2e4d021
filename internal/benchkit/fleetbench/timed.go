package fleetbench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/consultest"
)

// BenchmarkFleetTimed (issue 30, item 2) rolls fleets whose replacements
// take time: T to replace, then healthy after min_healthy_time. Its rows
// are judged against the ideal, ceil(N/K) × (T + min_healthy_time), which
// only a rollout with no coordination cost at all would reach.
const (
	// timedTarget is the most wall / ideal a row may take.
	timedTarget = 1.2
	// FLEET_BENCH_MIN_HEALTHY is every timed case's min_healthy_time
	// (default timedHealthy).
	timedHealthyEnv = "FLEET_BENCH_MIN_HEALTHY"
	timedHealthy    = 100 * time.Millisecond
	// FLEET_BENCH_MAX_N caps every timed and cancel case's N, to try the
	// harness quickly; the report says so.
	maxNEnv = "FLEET_BENCH_MAX_N"
)

var (
	mdTimed      = benchkit.Report{Env: "FLEET_BENCH_MD", Name: "fleet bench timed"}
	timedCommand = "go test -run '^$' -bench FleetTimed -benchtime 1x -timeout 90m ./agent/"
)

// timedCases are issue 30's rows, before FLEET_BENCH_MAX_N and with
// min_healthy_time left to timedCasesFor.
var timedCases = []fleetCase{{n: 1000, k: 1, replace: 50 * time.Millisecond}, {n: 1000, k: 10, replace: 200 * time.Millisecond},
	{n: 1000, k: 50, replace: time.Second}, {n: 100, k: 1, replace: time.Second}}

func envDuration(b *testing.B, env string, def time.Duration) time.Duration {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration", env, v)
	}
	return d
}

// maxN is FLEET_BENCH_MAX_N, or 0 when unset.
func maxN(b *testing.B) int {
	v := os.Getenv(maxNEnv)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive whole number", maxNEnv, v)
	}
	return n
}

func capN(n, limit int) int {
	if limit > 0 {
		return min(n, limit)
	}
	return n
}

func timedCasesFor(b *testing.B) []fleetCase {
	healthy, limit := envDuration(b, timedHealthyEnv, timedHealthy), maxN(b)
	out := slices.Clone(timedCases)
	for i := range out {
		out[i].healthy, out[i].n = healthy, capN(out[i].n, limit)
	}
	return out
}

// rounds is how many turns each slot takes at the least.
func (fc fleetCase) rounds() int { return (fc.n + fc.k - 1) / fc.k }

// ideal is ceil(N/K) × (T + min_healthy_time).
func (fc fleetCase) ideal() time.Duration {
	return time.Duration(fc.rounds()) * (fc.replace + fc.healthy)
}

func (r *fleetResult) idealRatio() float64 { return r.wall.Seconds() / r.ideal().Seconds() }

// Timed runs every timed case FLEET_BENCH_RUNS times, each on a fresh
// Consul dev agent, and publishes the report.
func Timed(b *testing.B, opts Options) {
	raiseNoFile(b, fleetNoFile)
	rep := &fleetReport{started: time.Now(), runs: fleetRuns(b)}
	cases := timedCasesFor(b)
	for run := range rep.runs {
		for _, fc := range cases {
			b.Run(fmt.Sprintf("%s/run=%d", fc.name(), run+1), func(b *testing.B) {
				srv := consultest.New(b, consultest.Options{HCL: fleetHCL})
				r := runFleetCase(b, fleetConsul{srv: srv}, fc, run, opts)
				b.ReportMetric(r.ideal().Seconds(), "ideal-s")
				b.ReportMetric(r.idealRatio(), "wall/ideal")
				rep.add(b, r)
			})
		}
	}
	if len(rep.rows) > 0 {
		mdTimed.Publish(b, rep.timedMarkdown(cases))
	}
}

// timedSplit is where a row's time over its ideal went, each part over
// the rollout: the first grant's wait after the commit; holds longer than
// T + min_healthy_time (grant, fence, release), summed over a slot's
// rounds; and the rest, slots left free between a release and the next
// grant.
type timedSplit struct{ over, first, hold, idle time.Duration }

func (r *fleetResult) split() timedSplit {
	s := timedSplit{over: r.wall - r.ideal(), first: r.firstGrant}
	var held time.Duration
	for _, t := range r.turnList {
		held += t.released - t.granted
	}
	if len(r.turnList) > 0 {
		perTurn := held/time.Duration(len(r.turnList)) - (r.replace + r.healthy)
		s.hold = perTurn * time.Duration(r.rounds())
	}
	s.idle = s.over - s.first - s.hold
	return s
}

// slotUse is the share of the K slots' time, from the first grant to the
// last release, that a node held one.
func (r *fleetResult) slotUse() float64 {
	var held time.Duration
	for _, t := range r.turnList {
		held += t.released - t.granted
	}
	span := r.wall - r.firstGrant
	return held.Seconds() / (float64(r.k) * max(span.Seconds(), 1e-9))
}

// refills pairs the j-th release with the (K+j)-th grant, the one that
// took the slot it freed while nodes waited, and returns the gaps' median
// and 90th percentile: how long a freed slot stayed free.
func refills(turns []fleetTurn, k int) (p50, p90 time.Duration) {
	var grants, releases []time.Duration
	for _, t := range turns {
		grants, releases = append(grants, t.granted), append(releases, t.released)
	}
	slices.Sort(grants)
	slices.Sort(releases)
	var gaps []time.Duration
	for j := 0; k+j < len(grants) && j < len(releases); j++ {
		gaps = append(gaps, grants[k+j]-releases[j])
	}
	if len(gaps) == 0 {
		return 0, 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2], gaps[len(gaps)*9/10]
}

// timedMedians is each case's run with the median wall / ideal, and every
// run's ratio, sorted.
func (rep *fleetReport) timedMedians() (rows []*fleetResult, every map[fleetCase][]float64) {
	return rep.mediansBy(func(r *fleetResult) float64 { return r.idealRatio() })
}

func (rep *fleetReport) timedMarkdown(cases []fleetCase) string {
	var sb strings.Builder
	cmd := mdTimed.Command(timedCommand)
	if rep.runs > 1 {
		cmd = fmt.Sprintf("%s=%d %s", fleetRunsEnv, rep.runs, cmd)
	}
	sb.WriteString(benchkit.Generated(cmd, rep.started, true))
	fmt.Fprintf(&sb, "One Consul %s dev agent, fresh for each case; N in-process agents as in the fleet bench above, with a runtime whose "+
		"replacement takes T after its fenced step and whose new workload reports healthy after min_healthy_time; %s, GOMAXPROCS=%d, %d CPUs. "+
		"Each case ran %d time(s), round the list of cases; a row is its run with the median wall / ideal.\n\n",
		consultest.Version, benchkit.Platform(), runtime.GOMAXPROCS(0), runtime.NumCPU(), rep.runs)
	rows, every := rep.timedMedians()
	sb.WriteString("| N | K | T | min_healthy_time | Ideal (s) | Wall (s) | Wall / ideal | Every run | Target ≤ 1.2× | Over ideal (s): first grant + holds beyond T+mht + slots idle | " +
		"Hold p50 (ms) | Freed slot idle p50 / p90 (ms) | JSON read/node, KB: group tree / slot / other | Slot use | Grant txns/node | Holders reads/node | Cores busy: agents + Consul | Note |\n")
	sb.WriteString("|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		sb.WriteString(r.timedRow(every[r.fleetCase]))
	}
	sb.WriteString(kOrder(rows, every))
	if v := os.Getenv(maxNEnv); v != "" {
		fmt.Fprintf(&sb, "\n**N capped at %s by %s**: not the issue's rows.\n", v, maxNEnv)
	}
	sb.WriteString("\nIdeal: ceil(N/K) × (T + min_healthy_time), the rollout with no cost between turns. Wall: commit → the last node released " +
		"its slot. Over ideal, split: the first grant's time after the commit (every agent wakes and joins the line); " +
		"(mean hold − T − min_healthy_time) × ceil(N/K), the grant, fence and release of each turn on a slot's path; " +
		"and the rest, slots left free while nodes waited. Freed slot idle: the j-th release to the (K+j)-th grant. " +
		"Slot use: the time nodes held slots over K × (first grant → last release). Grant txns and holders reads per node " +
		"count the agents' requests (a grant that loses its CAS to another is tried again). JSON read: response bodies, as in the fleet bench.\n")
	sb.WriteString("\nRequests per node, by what they are for (each one's count over N, from the commit until the fleet is quiet):\n\n")
	sb.WriteString(endpointTable(rows))
	return sb.String()
}

func (r *fleetResult) timedRow(every []float64) string {
	verdict := "met"
	if r.idealRatio() > timedTarget {
		verdict = fmt.Sprintf("**missed** by %.0f%%", (r.idealRatio()/timedTarget-1)*100)
	}
	s := r.split()
	p50, p90 := refills(r.turnList, r.k)
	holdReads := r.endpoints["head: read the holders"] + r.endpoints["head: wait on the holders (blocking)"]
	return fmt.Sprintf("| %d | %d | %s | %s | %.2f | %.2f | %.3f× | %s | %s | %.2f = %.2f + %.2f + %.2f | %.1f | %.1f / %.1f | %.0f / %.1f / %.1f | %.1f%% | %.2f | %.2f | %.2f + %.2f | %s |\n",
		r.n, r.k, r.replace, r.healthy, r.ideal().Seconds(), r.wall.Seconds(), r.idealRatio(), everyRun(every), verdict,
		s.over.Seconds(), s.first.Seconds(), s.hold.Seconds(), s.idle.Seconds(), benchkit.Ms(r.hold), benchkit.Ms(p50), benchkit.Ms(p90), r.kb[bytesGroup], r.kb[bytesSlot], r.kb[bytesOther],
		100*r.slotUse(), r.perNode(r.endpoints["txn: grant (and write replacing)"]), r.perNode(holdReads),
		r.busyAgents, r.busyConsul, r.note)
}

// kOrder judges the target that K = 50 rolls faster than K = 10, both at
// the same N, on the median rows and run by run.
func kOrder(rows []*fleetResult, every map[fleetCase][]float64) string {
	var k10, k50 *fleetResult
	for _, r := range rows {
		switch {
		case r.k == 10 && k10 == nil:
			k10 = r
		case r.k == 50 && k50 == nil:
			k50 = r
		}
	}
	if k10 == nil || k50 == nil || k10.n != k50.n {
		return ""
	}
	verdict := "met"
	if k50.wall >= k10.wall {
		verdict = "**missed**"
	}
	walls := func(r *fleetResult) string {
		ws := make([]string, len(every[r.fleetCase]))
		for i, v := range every[r.fleetCase] {
			ws[i] = fmt.Sprintf("%.2f", v*r.ideal().Seconds())
		}
		return strings.Join(ws, ", ")
	}
	return fmt.Sprintf("\nK = 50 faster than K = 10 (N = %d): %s; median walls %.2f s (K = 50, T = %s) against %.2f s (K = 10, T = %s); "+
		"every run's walls, sorted: %s s against %s s.\n", k50.n, verdict, k50.wall.Seconds(), k50.replace, k10.wall.Seconds(), k10.replace,
		walls(k50), walls(k10))
}
