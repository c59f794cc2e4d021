package fleetbench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/benchkit/agentbench"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// instantRuntime replaces at once and is always healthy: the benchmark
// measures coordination, not workloads. With a pace it is the timed
// runtime of BenchmarkFleetTimed and BenchmarkFleetCancel instead.
type instantRuntime struct {
	pace *runtimePace // nil: instant
	mu   sync.Mutex
	sha  string
}

// runtimePace makes a fleet's runtimes take time: a replacement takes
// replace after its fenced step, and the new workload reports healthy
// after the spec's min_healthy_time. While hold is open every replacement
// waits in its step, under its slot. steps counts the fenced steps that
// passed, which a CANCEL must stop.
type runtimePace struct {
	replace time.Duration
	hold    chan struct{}
	steps   atomic.Int64
}

func (r *instantRuntime) Inspect(context.Context) (agent.Observed, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return agent.Observed{SHA: r.sha}, nil
}

func (r *instantRuntime) Prepare(context.Context, *hashspec.Spec, string) error { return nil }

func (r *instantRuntime) Replace(ctx context.Context, _ *hashspec.Spec, sha string, step agent.StepFunc) error {
	if err := step(ctx, "replace"); err != nil {
		return err
	}
	if r.pace != nil {
		r.pace.steps.Add(1)
		if err := r.pace.wait(ctx); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sha = sha
	return nil
}

// wait takes the replacement's time, and waits for hold if it is set.
func (p *runtimePace) wait(ctx context.Context) error {
	if err := sleepCtx(ctx, p.replace); err != nil {
		return err
	}
	if p.hold == nil {
		return nil
	}
	select {
	case <-p.hold:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitHealthy reports healthy after min_healthy_time when paced, at once
// when not.
func (r *instantRuntime) WaitHealthy(ctx context.Context, s *hashspec.Spec) error {
	if r.pace == nil || s == nil {
		return nil
	}
	return sleepCtx(ctx, s.Update.MinHealthyTime.Std())
}

func (r *instantRuntime) Finish(context.Context) error           { return nil }
func (r *instantRuntime) Restore(context.Context, string) error  { return nil }
func (r *instantRuntime) Healthy(context.Context) (bool, string) { return true, "" }

// fleetMetrics reports each agent's turns to the fleet: SlotWait comes
// when Acquire returns, Replacement once the slot is released. One agent
// calls them one after the other, from one goroutine.
type fleetMetrics struct {
	f       *benchFleet
	granted time.Time
}

func (m *fleetMetrics) SlotWait(time.Duration)    { m.granted = time.Now() }
func (m *fleetMetrics) Replacement(result string) { m.f.turnDone(m.granted, result) }
func (*fleetMetrics) SlotHold(time.Duration)      {}
func (*fleetMetrics) Converged(bool)              {}
func (*fleetMetrics) ConsulError()                {}

// fleetTurn is one slot held: granted and released, since the commit.
type fleetTurn struct{ granted, released time.Duration }

// benchFleet is n agents of one group in this process.
type benchFleet struct {
	b *testing.B
	// fleetConsul: the agents' Consul agents are its clients, srv when
	// there are none.
	fleetConsul
	fc      fleetCase
	opts    Options
	group   string
	store   *coordinator.Store // the harness's own, uncounted
	traffic *fleetTraffic
	log     hclog.Logger
	cancel  context.CancelFunc
	running sync.WaitGroup

	// pace, when set, makes every agent's runtime take time (fc.paced).
	pace *runtimePace

	mu     sync.Mutex
	start  time.Time
	turns  []fleetTurn   // successful ones
	bad    []string      // results of turns that did not succeed
	turned chan struct{} // one send per turn, buffered
	// checksURL serves every agent's HTTP checks, unless fc.ttl.
	checksURL string
	// transports are the agents' clients', closed when they stop.
	transports []*http.Transport
}

func (f *benchFleet) turnDone(granted time.Time, result string) {
	f.mu.Lock()
	if result == "success" {
		f.turns = append(f.turns, fleetTurn{granted.Sub(f.start), time.Since(f.start)})
	} else {
		f.bad = append(f.bad, result)
	}
	f.mu.Unlock()
	select {
	case f.turned <- struct{}{}:
	default:
	}
}

func (f *benchFleet) commit(release string) string {
	f.b.Helper()
	healthy := time.Second // never waited for by the instant runtime
	if f.fc.paced() {
		healthy = f.fc.healthy
	}
	update := fmt.Sprintf(`{"max_parallel":%d,"min_healthy_time":%q}`, f.fc.k, healthy.String())
	return agentbench.Commit(f.b, f.store, f.group, "fleet-bench:"+release, update)
}

// startAgents starts the fleet's agents, each already running sha.
func (f *benchFleet) startAgents(sha string) {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	var checks *http.ServeMux
	if !f.fc.ttl {
		// One server for every agent's checks, as each agent's would be
		// on its own host.
		checks = http.NewServeMux()
		hs := httptest.NewServer(checks)
		f.b.Cleanup(hs.Close)
		f.checksURL = hs.URL
	}
	for i := range f.fc.n {
		node := fmt.Sprintf("n%04d", i)
		rt := &instantRuntime{sha: sha, pace: f.pace}
		cfg := agent.Config{Group: f.group, Node: node, Store: nil,
			Runtime: rt, Metrics: &fleetMetrics{f: f}, Logger: f.log, SessionTTL: fleetSessionTTL}
		if checks != nil {
			checks.Handle("/"+node+"/health", agent.HealthHandler(rt))
			checks.Handle("/"+node+"/alive", agent.AliveHandler())
			cfg.HealthURL, cfg.AliveURL = f.checksURL+"/"+node+"/health", f.checksURL+"/"+node+"/alive"
		}
		if f.fc.noMirror {
			cfg = f.opts.NoMirror(cfg)
		}
		addr := f.srv.HTTPAddr
		if len(f.clients) > 0 {
			addr = f.clients[i%len(f.clients)].HTTPAddr
		}
		c, tr, err := fleetClient(addr, f.traffic)
		if err != nil {
			f.b.Fatal(err)
		}
		f.transports = append(f.transports, tr)
		cfg.Store = coordinator.NewStore(c, "")
		a, err := agent.New(cfg)
		if err != nil {
			f.b.Fatal(err)
		}
		f.running.Add(1)
		go func() { defer f.running.Done(); _ = a.Run(ctx) }()
	}
}

// stopAgents stops every agent, which removes its service and session.
func (f *benchFleet) stopAgents() {
	f.cancel()
	done := make(chan struct{})
	go func() { f.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		f.b.Error("agents did not stop within 2m")
	}
	// Each agent's client keeps its connections for 90 s: thousands of
	// this process's file descriptors, held while the next case runs. The
	// group's keys go with the case's dev agent.
	for _, tr := range f.transports {
		tr.CloseIdleConnections()
	}
}

// converged waits until every node reports sha converged.
func (f *benchFleet) converged(sha string, limit time.Duration) {
	f.b.Helper()
	fleettest.WaitFor(f.b, limit, fmt.Sprintf("%d agents to converge", f.fc.n), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gs, err := f.store.Read(ctx, f.group, nil)
		if err != nil {
			return false
		}
		p := gs.Progress()
		return p.Total == f.fc.n && p.Done && gs.Desired.SHA == sha
	})
}

// sessionsReady waits until every agent has the session it keeps while
// idle (not in TTL mode, where a session is made per rollout), as agents
// that have run for a while before a commit have: one that start-up's
// burst cut off makes it again by itself, and the rollout is not to count
// that.
func (f *benchFleet) sessionsReady(limit time.Duration) {
	f.b.Helper()
	if f.fc.ttl {
		return
	}
	prefix := coordinator.ServiceName(f.group) + "-"
	// Each poll lists every session: once a second is enough.
	testkit.EventuallyEvery(f.b, limit, time.Second, fmt.Sprintf("%d agents' idle sessions", f.fc.n), func() bool {
		ss, _, err := f.srv.Client().Session().List(nil)
		if err != nil {
			return false
		}
		got := map[string]bool{} // by name: a node has one, or one and a stray
		for _, s := range ss {
			if strings.HasPrefix(s.Name, prefix) {
				got[s.Name] = true
			}
		}
		return len(got) == f.fc.n
	})
}

// awaitTurns waits for n successful turns, for at most limit. A turn that
// fails (stopped by its fence, say) is tried again by its agent.
func (f *benchFleet) awaitTurns(n int, limit time.Duration) error {
	deadline := time.After(limit)
	for {
		f.mu.Lock()
		got := len(f.turns)
		f.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-f.turned:
		case <-deadline:
			return fmt.Errorf("%d of %d turns done after %s", got, n, limit)
		}
	}
}
