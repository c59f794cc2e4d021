package lockbench

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/consultest"
)

var (
	mdReport = benchkit.Report{Env: "LOCKSTEP_BENCH_MD", Name: "lockstep bench"}
	command  = "go test -run '^$' -bench . -benchtime 1x -timeout 60m ./lockstep/"
)

// report collects the rows of one run of Benchmark.
type report struct {
	started time.Time
	mu      sync.Mutex
	rows    []*result
	fails   []*failover
}

func (r *report) add(b *testing.B, res *result) {
	res.report(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, res)
}

func (r *report) addFailover(b *testing.B, f *failover) {
	f.report(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fails = append(r.fails, f)
}

// find returns the row of system at n, or nil.
func (r *report) find(system string, n int) *result {
	for _, x := range r.rows {
		if x.system == system && x.n == n {
			return x
		}
	}
	return nil
}

func (r *report) markdown() string {
	var sb strings.Builder
	sb.WriteString(benchkit.Generated(mdReport.Command(command), r.started, true))
	fmt.Fprintf(&sb, "Consul %s dev agent, %s, GOMAXPROCS=%d.\n\n", consultest.Version, benchkit.Platform(), runtime.GOMAXPROCS(0))
	sb.WriteString("| System | N | Hold | Handoff p50 (ms) | Handoff p99 (ms) | Acquire-only p50 (ms) | Wall (s) " +
		"| Req/handoff (all) | Coord req/handoff | Max holders | p50 vs consul lock (same N; N=50 for N=200) | p50 vs api.Semaphore | Req vs api.Semaphore | Note |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, x := range r.rows {
		sb.WriteString(r.row(x))
	}
	fmt.Fprintf(&sb, "\nHandoff: one holder's end → the next holder may act. lockstep's holder acts once Acquire "+
		"and a Fence of its first step have returned (the grant is no step's fence), one round trip more than the others. A row with fewer than %d "+
		"handoffs per run is repeated in rounds of fresh contenders (N=10: %d rounds).\n", minHandoffs, rounds(10))
	sb.WriteString("\nRequests by class per row (coord = KV and txn; live = TTL passes and session renewals; " +
		"setup = sessions and checks made and destroyed, agent reads):\n\n")
	sb.WriteString("| System | N | Handoffs | coord | live | setup |\n|---|---:|---:|---:|---:|---:|\n")
	for _, x := range r.rows {
		if x.reqNote == "" {
			fmt.Fprintf(&sb, "| %s | %d | %d | %d | %d | %d |\n", x.system, x.n, x.handoffs(),
				x.reqs[reqCoord], x.reqs[reqLive], x.reqs[reqSetup])
		}
	}
	sb.WriteString("\n| Failover (SIGKILLed holder → next holder starts) | Tries | Median (s) | Min (s) | Max (s) | Timeouts (>60 s) | Note |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, f := range r.fails {
		_, lo, hi := benchkit.DurStats(f.tries)
		fmt.Fprintf(&sb, "| %s | %d | %.2f | %.2f | %.2f | %d | %s |\n", f.system, len(f.tries)+f.timeouts,
			benchkit.Quantile(f.tries, 0.5).Seconds(), lo.Seconds(), hi.Seconds(), f.timeouts, f.note)
	}
	return sb.String()
}

// row is x's row of the handoff table.
func (r *report) row(x *result) string {
	p50 := benchkit.Ms(benchkit.Quantile(x.gaps, 0.5))
	vsCLI, vsSem, reqSem := "–", "–", "–"
	// Against the CLI at the same N; where the CLI did not run, against its
	// largest N, which favours the CLI.
	cli := r.find("consul lock -n 1", x.n)
	if cli == nil {
		cli = r.find("consul lock -n 1", cliNs[len(cliNs)-1])
	}
	if cli != nil && x.system != cli.system {
		vsCLI = benchkit.Ratio(p50, benchkit.Ms(benchkit.Quantile(cli.gaps, 0.5)))
	}
	if sem := r.find("api.Semaphore", x.n); sem != nil && x != sem {
		vsSem = benchkit.Ratio(p50, benchkit.Ms(benchkit.Quantile(sem.gaps, 0.5)))
		reqSem = benchkit.Ratio(x.perHandoff(-1), sem.perHandoff(-1))
	}
	all, coord := "n/a", "n/a"
	if x.reqNote == "" {
		all, coord = fmt.Sprintf("%.1f", x.perHandoff(-1)), fmt.Sprintf("%.1f", x.perHandoff(reqCoord))
	}
	note := strings.TrimPrefix(benchkit.JoinNotes(x.note, x.reqNote), "n/a: ")
	return fmt.Sprintf("| %s | %d | %s | %.1f | %.1f | %.1f | %.2f | %s | %s | %d | %s | %s | %s | %s |\n",
		x.system, x.n, x.hold, p50, benchkit.Ms(benchkit.Quantile(x.gaps, 0.99)), benchkit.Ms(benchkit.Quantile(x.acqGaps, 0.5)),
		x.wall.Seconds(), all, coord, x.overlap, vsCLI, vsSem, reqSem, note)
}

// publish prints the report and writes it into the file
// LOCKSTEP_BENCH_MD names, if set.
func (r *report) publish(b *testing.B) {
	if len(r.rows) == 0 && len(r.fails) == 0 {
		return
	}
	mdReport.Publish(b, r.markdown())
}
