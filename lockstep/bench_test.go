package lockstep

// Benchmarks that compare lockstep with `consul lock -n 1` and api.Semaphore
// on one Consul dev agent: handoff gap, wall time, Consul HTTP requests per
// handoff, and failover after a SIGKILLed holder. Run them all at once:
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 60m ./lockstep/
//
// Each sub-benchmark does its work once, whatever b.N is, so -benchtime 1x
// is the intended setting. The Markdown table of results is logged at the
// end; set LOCKSTEP_BENCH_MD to a file, such as BENCHMARKS.md, to have it
// written there too, between benchMDBegin and benchMDEnd.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

const (
	// benchHoldTime is how long an in-process holder works; benchCLIHoldTime
	// is the `sleep 0.2` of a consul lock holder.
	benchHoldTime    = 20 * time.Millisecond
	benchCLIHoldTime = 200 * time.Millisecond
	// benchRunCap bounds one handoff run; contenders still waiting then are
	// stopped and the row says so.
	benchRunCap = 3 * time.Minute
	// benchTryCap bounds one failover try.
	benchTryCap    = time.Minute
	benchFailTries = 5
)

// benchCLINs are the contender counts of the consul lock CLI: a process
// each, so N=200 (about 8 GB of CLI processes) is left out.
var benchCLINs = []int{10, 50}

// benchNs are the contender counts of the in-process systems.
var benchNs = []int{10, 50, 200}

// benchHCL lifts the agent's cap of 200 HTTP connections per client IP:
// every contender here connects from 127.0.0.1, and at N=200 the waiters
// alone keep more than 200 blocking queries open. It applies to every
// system alike.
const benchHCL = `limits { http_max_conns_per_client = 4096 }`

func BenchmarkLockstep(b *testing.B) {
	srv := consultest.New(b, consultest.Options{HCL: benchHCL})
	rep := &benchReport{started: time.Now()}
	b.Run("handoff", func(b *testing.B) {
		// consul lock goes first, on a quiet agent: its requests are
		// counted from the agent's metrics, which cannot tell clients apart.
		for _, n := range benchCLINs {
			b.Run(fmt.Sprintf("consul-lock/N=%d", n), func(b *testing.B) {
				rep.add(b, benchCLIHandoff(b, srv, n))
			})
		}
		for _, n := range benchNs {
			b.Run(fmt.Sprintf("api-semaphore/N=%d", n), func(b *testing.B) {
				rep.add(b, benchAPISemHandoff(b, srv, n))
			})
		}
		for _, n := range benchNs {
			b.Run(fmt.Sprintf("lockstep/N=%d", n), func(b *testing.B) {
				rep.add(b, benchLockstepHandoff(b, srv, n))
			})
		}
	})
	b.Run("failover", func(b *testing.B) {
		b.Run("lockstep", func(b *testing.B) { rep.addFailover(b, benchLockstepFailover(b, srv)) })
		b.Run("consul-lock", func(b *testing.B) { rep.addFailover(b, benchCLIFailover(b, srv)) })
	})
	rep.publish(b)
}

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

// benchCounter is an http.RoundTripper that counts requests by class.
type benchCounter struct {
	base http.RoundTripper
	n    [reqClasses]atomic.Int64
}

func (c *benchCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n[reqClass(r.URL.Path)].Add(1)
	return c.base.RoundTrip(r)
}

func (c *benchCounter) counts() reqCounts {
	var out reqCounts
	for i := range out {
		out[i] = c.n[i].Load()
	}
	return out
}

// benchClient returns a client whose requests are counted, and a func that
// closes its idle connections. Many idle connections are kept, so that a
// herd of waiters does not churn through loopback ports.
func benchClient(tb testing.TB, addr string) (*api.Client, *benchCounter, func()) {
	tb.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1024
	ctr := &benchCounter{base: tr}
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme = addr, "http"
	cfg.HttpClient = &http.Client{Transport: ctr}
	c, err := api.NewClient(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c, ctr, tr.CloseIdleConnections
}

// benchHold is one holder's turn: acq when Acquire returned, start once it
// may act, end right before it released. For lockstep start is acq: its
// grant is a fence, and it carries the turn's first write.
type benchHold struct{ acq, start, end time.Time }

// benchContend runs n contenders at once and waits for all of them.
func benchContend(ctx context.Context, n int, f func(ctx context.Context, i int) (benchHold, error)) ([]benchHold, []error, time.Duration) {
	holds, errs := make([]benchHold, n), make([]error, n)
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

// benchMinHandoffs is how many handoffs a row is measured over at least: at
// small N a run is repeated, in rounds of fresh contenders, so that its
// median is not the middle of nine.
const benchMinHandoffs = 45

// benchRounds is how many runs of n contenders make benchMinHandoffs.
func benchRounds(n int) int { return max(1, (benchMinHandoffs+n-2)/max(n-1, 1)) }

// benchResult is one row: a system at one N.
type benchResult struct {
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

// benchRound is one run of a system's n contenders, named run (its keys
// live under bench/<run>/).
type benchRound func(ctx context.Context, run string) ([]benchHold, []error, time.Duration)

// benchRun runs benchRounds(n) rounds and sums them into one row, with the
// requests ctr counted meanwhile (a nil ctr counts none).
func benchRun(b *testing.B, c *api.Client, ctr *benchCounter, system, slug string, n int, hold time.Duration, round benchRound) *benchResult {
	var before reqCounts
	if ctr != nil {
		before = ctr.counts()
	}
	var r *benchResult
	for i := range benchRounds(n) {
		run := fmt.Sprintf("%s-%d-r%d", slug, n, i)
		ctx, cancel := context.WithTimeout(context.Background(), benchRunCap)
		hs, errs, wall := round(ctx, run)
		one := summarize(system, n, hold, hs, wall)
		benchNoteErrors(ctx, b, one, errs)
		cancel()
		_, _ = c.KV().DeleteTree("bench/"+run+"/", nil)
		r = r.merge(one)
	}
	if ctr != nil {
		after := ctr.counts()
		for i := range r.reqs {
			r.reqs[i] = after[i] - before[i]
		}
	}
	return r
}

// summarize turns the turns of one run into a row.
func summarize(system string, n int, hold time.Duration, hs []benchHold, wall time.Duration) *benchResult {
	r := &benchResult{system: system, n: n, hold: hold, wall: wall, rounds: 1}
	var done []benchHold
	var ivs []interval
	for i, h := range hs {
		if !h.start.IsZero() && !h.end.IsZero() {
			done = append(done, h)
			ivs = append(ivs, interval{name(i), h.start, h.end})
		}
	}
	r.holds = len(done)
	r.overlap = maxOverlap(ivs)
	slices.SortFunc(done, func(a, b benchHold) int { return a.start.Compare(b.start) })
	for i := 1; i < len(done); i++ {
		r.gaps = append(r.gaps, done[i].start.Sub(done[i-1].end))
		r.acqGaps = append(r.acqGaps, done[i].acq.Sub(done[i-1].end))
	}
	slices.Sort(r.gaps)
	slices.Sort(r.acqGaps)
	return r
}

// merge adds round o to r, which may be nil; it returns the sum.
func (r *benchResult) merge(o *benchResult) *benchResult {
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
	r.note = strings.Join(nonEmpty(r.note, o.note), "; ")
	return r
}

// handoffs counts, in each round, every turn but the first.
func (r *benchResult) handoffs() int { return max(r.holds-r.rounds, 0) }

// perHandoff is requests of class c (or all, c < 0) per handoff.
func (r *benchResult) perHandoff(c int) float64 {
	if r.reqNote != "" || r.handoffs() == 0 {
		return 0
	}
	v := r.reqs.total()
	if c >= 0 {
		v = r.reqs[c]
	}
	return float64(v) / float64(r.handoffs())
}

// quantile is the nearest-rank quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *benchResult) report(b *testing.B) {
	b.ReportMetric(0, "ns/op") // wall-s says it better
	b.ReportMetric(ms(quantile(r.gaps, 0.5)), "handoff-p50-ms")
	b.ReportMetric(ms(quantile(r.gaps, 0.99)), "handoff-p99-ms")
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

// benchGate writes a desired key for one run and returns a gate on it.
func benchGate(tb testing.TB, c *api.Client, run string) Gate {
	tb.Helper()
	key := "bench/" + run + "/desired"
	if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte(run)}, nil); err != nil {
		tb.Fatal(err)
	}
	p, _, err := c.KV().Get(key, nil)
	if err != nil || p == nil {
		tb.Fatalf("read %s: %v", key, err)
	}
	return Gate{DesiredKey: key, DesiredIndex: p.ModifyIndex, Closed: []string{"bench/" + run + "/cancel"}, Limit: 1}
}

// benchFailover is the failover row of one system.
type benchFailover struct {
	system   string
	tries    []time.Duration // sorted; kill -> next holder starts, timeouts excluded
	timeouts int
	errs     []string
	note     string
}

func (f *benchFailover) report(b *testing.B) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(quantile(f.tries, 0.5).Seconds(), "failover-p50-s")
	if len(f.tries) > 0 {
		b.ReportMetric(f.tries[len(f.tries)-1].Seconds(), "failover-max-s")
	}
	b.ReportMetric(float64(len(f.tries)), "tries")
	b.ReportMetric(float64(f.timeouts), "timeouts")
	for _, e := range f.errs {
		b.Log(e)
	}
}
