package lockstep

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// benchAPISemHandoff runs n in-process api.Semaphore contenders with limit
// 1, each with the session api.Semaphore makes for itself.
func benchAPISemHandoff(b *testing.B, srv *consultest.Server, n int) *benchResult {
	c, ctr, closeIdle := benchClient(b, srv.HTTPAddr)
	defer closeIdle()
	return benchRun(b, c, ctr, "api.Semaphore", "apisem", n, benchHoldTime, func(ctx context.Context, run string) ([]benchHold, []error, time.Duration) {
		prefix := "bench/" + run + "/slot"
		return benchContend(ctx, n, func(ctx context.Context, _ int) (benchHold, error) {
			return apiSemTurn(ctx, c, prefix)
		})
	})
}

// apiSemTurn acquires once, holds benchHoldTime and releases. Once ctx
// ends, a waiter gives up at its next wake (api.Semaphore has no context;
// its blocking queries wait up to 15s).
func apiSemTurn(ctx context.Context, c *api.Client, prefix string) (benchHold, error) {
	var hd benchHold
	sem, err := c.SemaphorePrefix(prefix, 1)
	if err != nil {
		return hd, err
	}
	lost, err := sem.Acquire(ctx.Done())
	if err != nil {
		return hd, err
	}
	if lost == nil {
		return hd, ctx.Err()
	}
	hd.acq = time.Now()
	hd.start = hd.acq
	time.Sleep(benchHoldTime)
	hd.end = time.Now()
	return hd, sem.Release()
}

// cliCmd is `consul lock -n=1` at prefix running child. It gets its own
// process group so that a kill takes its child along.
func cliCmd(ctx context.Context, addr, prefix, sessName string, child ...string) *exec.Cmd {
	bin, _ := consultest.Binary()
	args := append([]string{"lock", "-http-addr=" + addr, "-n=1", "-shell=false", "-name=" + sessName, prefix}, child...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// stampScript appends "start <unixnano>", waits, and appends "end
// <unixnano>" to file. An empty wait leaves the end out.
func stampScript(file, wait string) string {
	q := "'" + file + "'"
	s := "echo start $(date +%s%N) >> " + q
	if wait != "" {
		s += "; sleep " + wait + "; echo end $(date +%s%N) >> " + q
	}
	return s
}

// readStamps reads the start and end times a stampScript wrote.
func readStamps(file string) (start, end time.Time, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return start, end, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		ns, perr := strconv.ParseInt(f[1], 10, 64)
		if perr != nil {
			return start, end, fmt.Errorf("%s: %q: %w", file, line, perr)
		}
		switch f[0] {
		case "start":
			start = time.Unix(0, ns)
		case "end":
			end = time.Unix(0, ns)
		}
	}
	return start, end, nil
}

// benchCLIHandoff runs n `consul lock -n=1` processes at once, each holding
// for `sleep 0.2`. Requests come from the agent's own metrics.
func benchCLIHandoff(b *testing.B, srv *consultest.Server, n int) *benchResult {
	dir := b.TempDir()
	scrape := startMetricsScrape(srv.Client())
	defer scrape.stop()
	runStart := time.Now()
	r := benchRun(b, srv.Client(), nil, "consul lock -n 1", "cli", n, benchCLIHoldTime, func(ctx context.Context, run string) ([]benchHold, []error, time.Duration) {
		prefix := "bench/" + run + "/slot"
		return benchContend(ctx, n, func(ctx context.Context, i int) (benchHold, error) {
			file := filepath.Join(dir, run+"-"+name(i))
			cmd := cliCmd(ctx, srv.HTTPAddr, prefix, "bench-"+name(i), "sh", "-c", stampScript(file, "0.2"))
			if out, err := cmd.CombinedOutput(); err != nil {
				return benchHold{}, fmt.Errorf("consul lock: %w: %s", err, out)
			}
			start, end, err := readStamps(file)
			return benchHold{acq: start, start: start, end: end}, err
		})
	})
	r.reqs, r.reqNote = scrape.window(runStart, time.Now())
	return r
}

// metricsScrape polls the agent's /v1/agent/metrics, which shows the last
// finished 10s interval, and keeps the consul.api.http counts of each.
type metricsScrape struct {
	c      *api.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	seen map[int64]scraped // by the Unix second the interval starts
}

// scraped is one interval's counts; final once read after it ended (a young
// agent shows its current, unfinished interval).
type scraped struct {
	reqs  reqCounts
	final bool
}

const metricsInterval = 10 * time.Second // the agent's telemetry interval

func startMetricsScrape(c *api.Client) *metricsScrape {
	ctx, cancel := context.WithTimeout(context.Background(), benchRunCap+time.Minute)
	m := &metricsScrape{c: c, cancel: cancel, done: make(chan struct{}), seen: map[int64]scraped{}}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			m.poll()
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}()
	return m
}

func (m *metricsScrape) stop() { m.cancel(); <-m.done }

func (m *metricsScrape) poll() {
	info, err := m.c.Agent().Metrics()
	if err != nil {
		return
	}
	ts, err := time.Parse("2006-01-02 15:04:05 -0700 MST", info.Timestamp)
	if err != nil {
		return
	}
	var rc reqCounts
	for _, s := range info.Samples {
		if s.Name != "consul.api.http" {
			continue
		}
		path := "/" + strings.ReplaceAll(s.Labels["path"], "_", "/")
		// Only what `consul lock` sends: not the harness's readiness checks
		// nor this scrape.
		if strings.HasPrefix(path, "/v1/kv/") || strings.HasPrefix(path, "/v1/session/") || path == "/v1/agent/self" {
			rc[reqClass(path)] += int64(s.Count)
		}
	}
	final := time.Now().After(ts.Add(metricsInterval + 100*time.Millisecond))
	m.mu.Lock()
	if !m.seen[ts.Unix()].final {
		m.seen[ts.Unix()] = scraped{rc, final}
	}
	m.mu.Unlock()
}

// window sums the intervals that overlap [from, to], once the last of them
// has finished and been read, or says why it cannot.
func (m *metricsScrape) window(from, to time.Time) (reqCounts, string) {
	first, last := from.Truncate(metricsInterval), to.Truncate(metricsInterval)
	err := benchPoll(3*metricsInterval, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.seen[last.Unix()].final
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum reqCounts
	if err != nil {
		return sum, "n/a: the agent's metrics interval holding the end of the run was not seen"
	}
	for ts := first; !ts.After(last); ts = ts.Add(metricsInterval) {
		sc := m.seen[ts.Unix()]
		if !sc.final {
			return sum, "n/a: a metrics interval of the run was missed"
		}
		for i := range sum {
			sum[i] += sc.reqs[i]
		}
	}
	return sum, ""
}

// benchCLIFailover runs benchFailTries tries side by side, each on its own
// prefix: holder A runs `consul lock` around a long sleep, contender B waits
// at the same prefix, A's process group is SIGKILLed, and the try times kill
// -> B's child stamping its start.
func benchCLIFailover(b *testing.B, srv *consultest.Server) *benchFailover {
	dir := b.TempDir()
	f := &benchFailover{system: "consul lock -n 1",
		note: fmt.Sprintf("%d tries run side by side, each on its own prefix; holder killed 7.5-13.5 s "+
			"after it started, across its 7.5 s session-renew cycle", benchFailTries)}
	type res struct {
		d   time.Duration
		err error
	}
	out := make(chan res, benchFailTries)
	for i := range benchFailTries {
		go func() {
			d, err := cliFailoverTry(srv, filepath.Join(dir, fmt.Sprintf("try%d", i)), i)
			out <- res{d, err}
		}()
	}
	for range benchFailTries {
		r := <-out
		switch {
		case errors.Is(r.err, context.DeadlineExceeded):
			f.timeouts++
		case r.err != nil:
			b.Errorf("consul lock failover: %v", r.err)
			f.errs = append(f.errs, r.err.Error())
		default:
			f.tries = append(f.tries, r.d)
		}
	}
	slices.Sort(f.tries)
	return f
}

func cliFailoverTry(srv *consultest.Server, file string, i int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), benchTryCap+30*time.Second)
	defer cancel()
	c := srv.Client()
	prefix := fmt.Sprintf("bench/cli-failover/%d", i)
	a := cliCmd(ctx, srv.HTTPAddr, prefix, fmt.Sprintf("bench-fo-%d-a", i), "sh", "-c", stampScript(file+".a", "")+"; exec sleep 120")
	if err := a.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = syscall.Kill(-a.Process.Pid, syscall.SIGKILL); _ = a.Wait() }()
	if err := benchPoll(30*time.Second, func() bool { s, _, _ := readStamps(file + ".a"); return !s.IsZero() }); err != nil {
		return 0, fmt.Errorf("holder A did not start: %w", err)
	}
	bName := fmt.Sprintf("bench-fo-%d-b", i)
	bc := cliCmd(ctx, srv.HTTPAddr, prefix, bName, "sh", "-c", stampScript(file+".b", ""))
	if err := bc.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = syscall.Kill(-bc.Process.Pid, syscall.SIGKILL); _ = bc.Wait() }()
	if err := benchPoll(30*time.Second, func() bool {
		ss, _, err := c.Session().List(nil)
		return err == nil && slices.ContainsFunc(ss, func(s *api.SessionEntry) bool { return s.Name == bName })
	}); err != nil {
		return 0, fmt.Errorf("contender B made no session: %w", err)
	}
	time.Sleep(failPhase(i, 15*time.Second/2)) // the CLI renews every TTL/2
	killed := time.Now()
	if err := syscall.Kill(-a.Process.Pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	var started time.Time
	if err := benchPoll(benchTryCap, func() bool { started, _, _ = readStamps(file + ".b"); return !started.IsZero() }); err != nil {
		return 0, context.DeadlineExceeded
	}
	_, _ = c.KV().DeleteTree(prefix+"/", nil)
	return started.Sub(killed), nil
}
