package fleetbench

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/consultest"
)

// FLEET_BENCH_MD names a Markdown file to write the results into, as the
// block "fleet bench" (see benchkit.Report).
var (
	mdReport     = benchkit.Report{Env: "FLEET_BENCH_MD", Name: "fleet bench"}
	fleetCommand = "go test -run '^$' -bench Fleet -benchtime 1x -timeout 90m ./agent/"
)

// fleetReport collects the rows of one run of BenchmarkFleet: runs of each
// case.
type fleetReport struct {
	started time.Time
	runs    int
	mu      sync.Mutex
	rows    []*fleetResult
}

// medians picks each case's run with the median wall / bound (the slower
// of the middle two for an even count), in the order the cases first ran,
// and gives every case's ratios, sorted.
func (rep *fleetReport) medians() (rows []*fleetResult, every map[fleetCase][]float64) {
	return rep.mediansBy((*fleetResult).ratio)
}

// mediansBy is medians by the ratio key gives.
func (rep *fleetReport) mediansBy(key func(*fleetResult) float64) (rows []*fleetResult, every map[fleetCase][]float64) {
	byCase := map[fleetCase][]*fleetResult{}
	var order []fleetCase
	for _, r := range rep.rows {
		if _, ok := byCase[r.fleetCase]; !ok {
			order = append(order, r.fleetCase)
		}
		byCase[r.fleetCase] = append(byCase[r.fleetCase], r)
	}
	every = make(map[fleetCase][]float64, len(order))
	for _, fc := range order {
		runs := slices.SortedFunc(slices.Values(byCase[fc]), func(a, b *fleetResult) int { return cmp.Compare(key(a), key(b)) })
		rows = append(rows, runs[len(runs)/2])
		for _, r := range runs {
			every[fc] = append(every[fc], key(r))
		}
	}
	return rows, every
}

// everyRun lists a case's ratios for the table.
func everyRun(ratios []float64) string {
	s := make([]string, len(ratios))
	for i, v := range ratios {
		s[i] = fmt.Sprintf("%.2f×", v)
	}
	return strings.Join(s, ", ")
}

func (r *fleetResult) perNode(v int64) float64 { return float64(v) / float64(max(r.n, 1)) }

func (r *fleetResult) reads() int64 {
	return r.counts.reads[fleetCoord] + r.counts.reads[fleetSetup] + r.counts.reads[fleetLive]
}

// writes leaves out liveness, which is counted on its own.
func (r *fleetResult) writes() int64 {
	return r.counts.writes[fleetCoord] + r.counts.writes[fleetSetup]
}

func (r *fleetResult) live() int64 { return r.counts.writes[fleetLive] }

func (r *fleetResult) ratio() float64 { return r.wall.Seconds() / max(r.bound.Seconds(), 1e-9) }

// clientRatio is the wall time over the bound timed through a client agent,
// or "–" when the agents share the server's own agent.
func (r *fleetResult) clientRatio() string {
	if r.boundClient <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f× (%.2f s)", r.wall.Seconds()/r.boundClient.Seconds(), r.boundClient.Seconds())
}

func (rep *fleetReport) add(b *testing.B, r *fleetResult) {
	b.ReportMetric(0, "ns/op") // wall-s says it better
	b.ReportMetric(r.wall.Seconds(), "wall-s")
	b.ReportMetric(r.bound.Seconds(), "bound-s")
	b.ReportMetric(r.ratio(), "wall/bound")
	if r.boundClient > 0 {
		b.ReportMetric(r.wall.Seconds()/r.boundClient.Seconds(), "wall/client-bound")
	}
	b.ReportMetric(r.perNode(r.counts.all()), "req/node")
	b.ReportMetric(r.perNode(r.reads()), "reads/node")
	b.ReportMetric(r.perNode(r.writes()), "writes/node")
	b.ReportMetric(r.perNode(r.live()), "live/node")
	b.ReportMetric(r.perNode(int64(r.raft)), "raft/node")
	b.ReportMetric(r.kb[bytesGroup]+r.kb[bytesSlot]+r.kb[bytesOther], "json-kb/node")
	b.ReportMetric(r.perRelease, "reads/release")
	if !r.span.whole {
		b.ReportMetric(benchkit.Ms(r.span.perRelease()), "turn-in-line-ms")
	}
	if r.k == 1 {
		b.ReportMetric(float64(r.handoff)/1e6, "handoff-p50-ms")
	}
	b.ReportMetric(float64(r.hold)/1e6, "hold-p50-ms")
	b.ReportMetric(r.slowLive.Seconds(), "slowest-ttl-pass-s")
	b.ReportMetric(r.firstGrant.Seconds(), "first-grant-s")
	b.ReportMetric(r.busyAgents+r.busyConsul, "cores-busy")
	if r.note != "" {
		b.Log(r.note)
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	rep.rows = append(rep.rows, r)
}

func (rep *fleetReport) markdown() string {
	var sb strings.Builder
	cmd := mdReport.Command(fleetCommand)
	if rep.runs > 1 {
		cmd = fmt.Sprintf("%s=%d %s", fleetRunsEnv, rep.runs, cmd)
	}
	sb.WriteString(benchkit.Generated(cmd, rep.started, true))
	fmt.Fprintf(&sb, "One Consul %s dev agent, the only server, fresh for each case (rows marked \"%d servers\": a fresh cluster of that many instead); "+
		"N in-process agents, each with its own client and an instant runtime; %s, GOMAXPROCS=%d.\n\n",
		consultest.Version, clusterServers, benchkit.Platform(), runtime.GOMAXPROCS(0))
	rows, every := rep.medians()
	fmt.Fprintf(&sb, "Each case ran %d time(s), the runs going round the list of cases; a row is the case's run with the median wall / bound, "+
		"and \"every run\" lists them all, sorted.\n\n", rep.runs)
	sb.WriteString("| N | K | Consul | Wall (s) | Bound: 3 CAS/node (s) | Wall / bound | Wall / bound, every run | Wall / bound via a client agent (that bound) | Req/node | Reads/node | Writes/node " +
		"| Liveness/node | Raft writes/node | JSON read/node, KB: group tree / slot / other | Reads/release (steady) | Turn once all in line, ms (vs bound/N) | First grant (s) | Handoff p50 (ms) | Hold p50 (ms) | Slowest TTL pass (s) | Cores busy: agents + Consul | Note |\n")
	sb.WriteString("|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		sb.WriteString(r.markdownRow(every[r.fleetCase]))
	}
	fmt.Fprintf(&sb, "\nConsul: the nodes' agents all talk to the one dev agent (the only server), or are spread evenly over "+
		"client agents joined to it, as a real fleet has one per node; rows marked \"%d servers\" run on that many "+
		"Consul servers on loopback (persistent, bootstrap_expect = %[1]d, raft_multiplier = 1), the nodes spread evenly over client agents joined to them all. Checks: as `rollagent run` does by default "+
		"(--health-addr=auto, with Consul on loopback), each agent serves its workload's health and its own liveness over HTTP, "+
		"the Consul agent runs both checks, and the agent keeps one session, bound to the liveness check, from before the rollout; "+
		"rows marked \"TTL checks\" run the agents as --health-addr=off does: they pass TTL checks themselves, and make a session "+
		"per rollout, bound to a TTL check registered with the node's \"waiting\" state. "+
		"Rows marked \"no state mirror\" are a diagnostic, not what `rollagent run` does: each agent registers its service once, "+
		"and not again at each change of state, so the Consul UI would not follow the rollout; they show what that mirror costs a Consul agent "+
		"that carries every node's service. "+
		"Session TTL %s (the agent's --session-ttl; the liveness check runs every third of it): "+
		"a shared agent stalls its local endpoints while it syncs thousands of checks and services.\n", clusterServers, fleetSessionTTL)
	fmt.Fprintf(&sb, "\nWall: commit of the new SHA → last node released its slot. Bound: N×3 CAS writes of one key, "+
		"one after another by one client, timed on the dev agent (on a cluster, its leader) just before the case; for the client-agent rows also through one of the client agents, "+
		"as each request of theirs goes. Requests are counted "+
		"from the commit until the fleet is quiet again; writes leave out liveness (TTL check passes, "+
		"which grow with the time a node waits in line). Raft writes: the leader's last_log_index, before and after (on a cluster, of the server that leads at each end; the row's note says when that changed). "+
		"JSON read: response bodies (agents ask for them uncompressed, as `rollagent run` does) of reads of a group's whole tree (coordinator.Store.Read; agents "+
		"read with coordinator.ReadFor, the desired key and one transaction, counted in the rest), "+
		"of lockstep's reads of the slot, and of the rest. "+
		"Reads/release: reads sent from the last node joining the line to the last release, per release in that span "+
		"(from the first grant instead when nodes joined so late that fewer than 5 releases came after). "+
		"Turn once all in line: that span's time per release, against the bound's time per node. "+
		"Cores busy: CPU time (utime+stime from /proc) of this process, which runs every agent, and of the Consul agents, "+
		"from the commit to the last turn, over that time; the machine has %d.\n", runtime.NumCPU())
	sb.WriteString("\nRequests per node, by what they are for (each one's count over N, from the commit until the fleet is quiet):\n\n")
	sb.WriteString(endpointTable(rows))
	return sb.String()
}

// markdownRow is the case's row in the results table; every is its ratios
// over all runs.
func (r *fleetResult) markdownRow(every []float64) string {
	handoff := "–" // release → next grant pairs up only at K=1
	if r.k == 1 {
		handoff = fmt.Sprintf("%.1f", float64(r.handoff)/1e6)
	}
	per := fmt.Sprintf("%.1f (%d releases)", r.perRelease, r.span.releases)
	turn := fmt.Sprintf("%.1f (%.1f×)", benchkit.Ms(r.span.perRelease()), r.span.perRelease().Seconds()/(r.bound.Seconds()/float64(r.n)))
	if r.span.whole {
		per = fmt.Sprintf("%.1f (%d releases, from the first grant)", r.perRelease, r.span.releases)
		turn = "– (joined late)"
	}
	slowLive := fmt.Sprintf("%.2f", r.slowLive.Seconds())
	if r.liveStuck > 0 {
		slowLive = fmt.Sprintf("≥ %.2f (%d still in flight at the end)", r.slowLive.Seconds(), r.liveStuck)
	}
	return fmt.Sprintf("| %d | %d | %s | %.2f | %.2f | %.2f× | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f / %.1f / %.1f | %s | %s | %.2f | %s | %.1f | %s | %.2f + %.2f | %s |\n",
		r.n, r.k, r.consulName(true), r.wall.Seconds(), r.bound.Seconds(), r.ratio(), everyRun(every), r.clientRatio(), r.perNode(r.counts.all()), r.perNode(r.reads()),
		r.perNode(r.writes()), r.perNode(r.live()), r.perNode(int64(r.raft)), r.kb[bytesGroup], r.kb[bytesSlot], r.kb[bytesOther], per, turn, r.firstGrant.Seconds(),
		handoff, float64(r.hold)/1e6, slowLive, r.busyAgents, r.busyConsul, r.note)
}

// consulName names the row's Consul topology: in full for the table's
// Consul column, or short for a column heading.
func (r *fleetResult) consulName(full bool) string {
	pick := func(long, short string) string {
		if full {
			return long
		}
		return short
	}
	name := pick("1 shared agent", "shared")
	switch {
	case r.servers > 0:
		name = fmt.Sprintf(pick("%d servers, %d client agents", "%d servers %d clients"), r.servers, r.clients)
	case r.clients > 0:
		name = fmt.Sprintf(pick("%d client agents", "%d clients"), r.clients)
	}
	if r.ttl {
		name += pick(", TTL checks", " TTL")
	}
	if r.noMirror {
		name += pick(", no state mirror (diagnostic)", " no mirror")
	}
	if r.paced() && !full {
		name += " T=" + r.replace.String()
	}
	return name
}

// publish prints the table and writes it into the file FLEET_BENCH_MD
// names, if set.
func (rep *fleetReport) publish(b *testing.B) {
	if len(rep.rows) == 0 {
		return
	}
	md := rep.markdown()
	if rows, _ := rep.medians(); len(rows) < len(fleetCases) && os.Getenv(mdReport.Env) != "" {
		// A -bench filter ran some of the cases: their rows alone must not
		// replace the block, which holds them all.
		fmt.Println("\n" + md)
		b.Logf("%d of %d cases ran: %s left as it was", len(rows), len(fleetCases), os.Getenv(mdReport.Env))
		return
	}
	mdReport.Publish(b, md)
}
