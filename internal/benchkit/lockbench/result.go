package lockbench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/testkit"
)

// Request classes: coordination (KV and transactions), liveness (TTL check
// passes and session renewals, which scale with contenders × time) and
// setup (sessions and checks made and destroyed, agent reads).
const (
	reqCoord = iota
	reqLive
	reqSetup
	reqClasses
)

// reqClass classifies an HTTP path, or a metrics path label turned back into
// one ("v1_kv_" -> "/v1/kv/").
func reqClass(path string) int {
	has := func(ps ...string) bool {
		return slices.ContainsFunc(ps, func(p string) bool { return strings.HasPrefix(path, p) })
	}
	switch {
	case has("/v1/kv/", "/v1/txn"):
		return reqCoord
	case has("/v1/agent/check/update/", "/v1/agent/check/pass/", "/v1/session/renew/"):
		return reqLive
	}
	return reqSetup
}

type reqCounts [reqClasses]int64

func (r reqCounts) total() int64 { return r[reqCoord] + r[reqLive] + r[reqSetup] }

// counts are the requests ctr kept, by class.
func counts(ctr *testkit.Counter) reqCounts {
	var out reqCounts
	for i := range out {
		out[i] = int64(ctr.Count(func(r testkit.Request) bool { return reqClass(r.Path) == i }))
	}
	return out
}

// countedClient returns a client whose requests are counted, and a func
// that closes its idle connections. Many idle connections are kept, so that
// a herd of waiters does not churn through loopback ports.
func countedClient(tb testing.TB, addr string) (*api.Client, *testkit.Counter, func()) {
	tb.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1024
	ctr := &testkit.Counter{Next: tr}
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme = addr, "http"
	cfg.HttpClient = &http.Client{Transport: ctr}
	c, err := api.NewClient(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c, ctr, tr.CloseIdleConnections
}

// Hold is one holder's turn: Acq when Acquire returned, Start once it may
// act, End right before it released. For lockstep Start is after its first
// Fence: the grant is no step's fence.
type Hold struct{ Acq, Start, End time.Time }

// contend runs n contenders at once and waits for all of them.
func contend(ctx context.Context, n int, f func(ctx context.Context, i int) (Hold, error)) ([]Hold, []error, time.Duration) {
	holds, errs := make([]Hold, n), make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holds[i], errs[i] = f(ctx, i)
		}()
	}
	wg.Wait()
	return holds, errs, time.Since(start)
}

// minHandoffs is how many handoffs a row is measured over at least: at
// small N a run is repeated, in rounds of fresh contenders, so that its
// median is not the middle of nine.
const minHandoffs = 45

// rounds is how many runs of n contenders make minHandoffs.
func rounds(n int) int { return max(1, (minHandoffs+n-2)/max(n-1, 1)) }

// result is one row: a system at one N.
type result struct {
	system  string
	n       int
	hold    time.Duration
	rounds  int             // runs of n contenders
	holds   int             // turns completed
	gaps    []time.Duration // sorted; end of one turn -> start of the next
	acqGaps []time.Duration // sorted; end of one turn -> Acquire returning
	wall    time.Duration
	reqs    reqCounts
	reqNote string // why requests were not counted, if they were not
	overlap int    // most turns open at once
	note    string
}

// round is one run of a system's n contenders, named run (its keys live
// under bench/<run>/).
type round func(ctx context.Context, run string) ([]Hold, []error, time.Duration)

// run runs rounds(n) rounds and sums them into one row, with the requests
// ctr counted meanwhile (a nil ctr counts none).
func run(b *testing.B, c *api.Client, ctr *testkit.Counter, system, slug string, n int, hold time.Duration, rd round) *result {
	var before reqCounts
	if ctr != nil {
		before = counts(ctr)
	}
	var r *result
	for i := range rounds(n) {
		name := fmt.Sprintf("%s-%d-r%d", slug, n, i)
		ctx, cancel := context.WithTimeout(context.Background(), runCap)
		hs, errs, wall := rd(ctx, name)
		one := summarize(system, n, hold, hs, wall)
		noteErrors(ctx, b, one, errs)
		cancel()
		_, _ = c.KV().DeleteTree("bench/"+name+"/", nil)
		r = r.merge(one)
	}
	if ctr != nil {
		after := counts(ctr)
		for i := range r.reqs {
			r.reqs[i] = after[i] - before[i]
		}
	}
	return r
}

// noteErrors notes a capped run in its row and fails on other errors.
func noteErrors(ctx context.Context, b *testing.B, r *result, errs []error) {
	if ctx.Err() != nil {
		r.note = fmt.Sprintf("capped at %s: %d of %d turns done", runCap, r.holds, r.n)
		return
	}
	for _, err := range errs {
		if err != nil {
			b.Errorf("%s N=%d: %v", r.system, r.n, err)
			return
		}
	}
}

// summarize turns the turns of one run into a row.
func summarize(system string, n int, hold time.Duration, hs []Hold, wall time.Duration) *result {
	r := &result{system: system, n: n, hold: hold, wall: wall, rounds: 1}
	var done []Hold
	for _, h := range hs {
		if !h.Start.IsZero() && !h.End.IsZero() {
			done = append(done, h)
		}
	}
	r.holds = len(done)
	r.overlap = maxOverlap(done)
	slices.SortFunc(done, func(a, b Hold) int { return a.Start.Compare(b.Start) })
	for i := 1; i < len(done); i++ {
		r.gaps = append(r.gaps, done[i].Start.Sub(done[i-1].End))
		r.acqGaps = append(r.acqGaps, done[i].Acq.Sub(done[i-1].End))
	}
	slices.Sort(r.gaps)
	slices.Sort(r.acqGaps)
	return r
}

// maxOverlap is the most turns open at one instant: the most is reached as
// one starts, and a turn that ends as another starts is no longer open.
func maxOverlap(hs []Hold) int {
	most := 0
	for _, h := range hs {
		open := 0
		for _, o := range hs {
			if !o.Start.After(h.Start) && o.End.After(h.Start) {
				open++
			}
		}
		most = max(most, open)
	}
	return most
}

// merge adds round o to r, which may be nil; it returns the sum.
func (r *result) merge(o *result) *result {
	if r == nil {
		return o
	}
	r.rounds += o.rounds
	r.holds += o.holds
	r.wall += o.wall
	r.overlap = max(r.overlap, o.overlap)
	r.gaps = append(r.gaps, o.gaps...)
	r.acqGaps = append(r.acqGaps, o.acqGaps...)
	slices.Sort(r.gaps)
	slices.Sort(r.acqGaps)
	r.note = benchkit.JoinNotes(r.note, o.note)
	return r
}

// handoffs counts, in each round, every turn but the first.
func (r *result) handoffs() int { return max(r.holds-r.rounds, 0) }

// perHandoff is requests of class c (or all, c < 0) per handoff.
func (r *result) perHandoff(c int) float64 {
	if r.reqNote != "" || r.handoffs() == 0 {
		return 0
	}
	v := r.reqs.total()
	if c >= 0 {
		v = r.reqs[c]
	}
	return float64(v) / float64(r.handoffs())
}

func (r *result) report(b *testing.B) {
	b.ReportMetric(0, "ns/op") // wall-s says it better
	b.ReportMetric(benchkit.Ms(benchkit.Quantile(r.gaps, 0.5)), "handoff-p50-ms")
	b.ReportMetric(benchkit.Ms(benchkit.Quantile(r.gaps, 0.99)), "handoff-p99-ms")
	b.ReportMetric(r.wall.Seconds(), "wall-s")
	b.ReportMetric(float64(r.holds), "holds")
	b.ReportMetric(float64(r.overlap), "max-holders")
	if r.reqNote == "" {
		b.ReportMetric(r.perHandoff(-1), "req/handoff")
		b.ReportMetric(r.perHandoff(reqCoord), "coord-req/handoff")
	}
	if r.note != "" {
		b.Log(r.note)
	}
}
