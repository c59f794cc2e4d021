package agent_test

// BenchmarkFleet rolls a new SHA across 100, 300 and 1,000 in-process
// agents (agent.New, each with its own Consul client and a runtime that
// replaces at once) against one Consul dev agent on loopback (a fresh one
// for each case), and measures
// what the rollout costs Consul per node as N grows. The shared agent holds
// every node's session checks and service, which a real fleet spreads over
// a Consul agent per node; its anti-entropy then does O(N) work per change
// under one lock. So the 1,000-node cases run a second time with the nodes
// spread over fleetClientAgents client agents joined to the dev agent:
//
//	go test -run '^$' -bench Fleet -benchtime 1x -timeout 90m ./agent/
//
// Each case rolls once per run (FLEET_BENCH_RUNS, default 1), whatever b.N
// is. The Markdown table of results is printed at the end; set
// FLEET_BENCH_MD to a file to have it written there too, as the block
// fleetMDName.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// fleetCase is one rollout: n agents at max_parallel k, talking to the dev
// agent, or when clients is set, spread evenly over that many client agents.
// Its agents serve their workload's health and their liveness over HTTP for
// the Consul agent to check, as `rollagent run` does by default, unless ttl:
// then they pass TTL checks themselves, as with --health-addr=off, and make
// a session per rollout. A noMirror case keeps each node's state out of its
// Consul service (agent.WithoutStateMirror), which `rollagent run` never
// does: it shows what that mirror, which the Consul UI shows, costs.
type fleetCase struct {
	n, k, clients int
	ttl, noMirror bool
}

// FLEET_BENCH_RUNS is how many times each case runs (default 1). The runs go
// round the whole list of cases, so that a slow spell of a noisy machine
// falls on different cases, and the report gives each case's median run.
const fleetRunsEnv = "FLEET_BENCH_RUNS"

func fleetRuns(b *testing.B) int {
	v := os.Getenv(fleetRunsEnv)
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 20 {
		b.Fatalf("%s=%q: want a whole number from 1 to 20", fleetRunsEnv, v)
	}
	return n
}

var fleetCases = []fleetCase{{n: 100, k: 1, ttl: true}, {n: 100, k: 1}, {n: 300, k: 1, ttl: true}, {n: 300, k: 1},
	{n: 1000, k: 1}, {n: 1000, k: 10},
	{n: 1000, k: 1, clients: fleetClientAgents}, {n: 1000, k: 10, clients: fleetClientAgents},
	{n: 300, k: 1, noMirror: true}, {n: 1000, k: 1, noMirror: true}}

// fleetClientAgents is how many client agents the spread cases use: 100
// nodes each, about what one shared agent carried well at N=100.
const fleetClientAgents = 10

func (fc fleetCase) name() string {
	name := fmt.Sprintf("N=%d/K=%d/shared", fc.n, fc.k)
	if fc.clients > 0 {
		name = fmt.Sprintf("N=%d/K=%d/clients=%d", fc.n, fc.k, fc.clients)
	}
	if fc.ttl {
		name += "/ttl"
	}
	if fc.noMirror {
		name += "/no-mirror"
	}
	return name
}

const (
	// fleetHCL lifts the agent's cap of 200 HTTP connections per client
	// IP: every agent here connects from 127.0.0.1, with up to three
	// blocking queries open each. It also quiets the agent's log: at debug
	// level its anti-entropy logs every service and check it holds, here
	// thousands, on every sync.
	fleetHCL = `limits { http_max_conns_per_client = 16384 }
log_level = "warn"
enable_debug = true`
	// fleetClientHCL is the client agents' configuration: debug too, so
	// that one of them can be profiled.
	fleetClientHCL = fleetHCL
	// fleetNoFile is the open-file limit the benchmark (and the Consul
	// agent it starts, which inherits it) asks for: a few connections per
	// agent on both ends.
	fleetNoFile = 16384
	// fleetSessionTTL replaces the default 3s session TTL (the agent's
	// --session-ttl). All N agents share one Consul agent here, and its
	// anti-entropy syncs every service and check change to the catalog
	// while it holds the lock that TTL passes, check and service
	// registrations all wait on: at N=300 a pass waited up to 6s, and
	// sessions lost that way re-register checks and stall it further. In
	// production each node has a Consul agent of its own.
	fleetSessionTTL = 30 * time.Second
	// fleetRolloutCap bounds one rollout.
	fleetRolloutCap = 15 * time.Minute
)

func BenchmarkFleet(b *testing.B) {
	raiseNoFile(b, fleetNoFile)
	rep := &fleetReport{started: time.Now(), runs: fleetRuns(b)}
	for run := range rep.runs {
		for _, fc := range fleetCases {
			b.Run(fmt.Sprintf("%s/run=%d", fc.name(), run+1), func(b *testing.B) {
				// A fresh dev agent, and fresh client agents, for each case,
				// stopped at its end: a Consul agent that has just seen 1,000
				// services and checks go is slow for a while, and a case's
				// figures should not depend on the cases run before it.
				srv := consultest.New(b, consultest.Options{HCL: fleetHCL})
				clients := make([]*consultest.Server, fc.clients)
				for i := range clients {
					clients[i] = consultest.New(b, consultest.Options{Client: true, Join: []string{srv.SerfAddr}, HCL: fleetClientHCL})
				}
				rep.add(b, runFleetCase(b, srv, clients, fc, run))
			})
		}
	}
	rep.publish(b)
}

// fleetLogger logs the agents at warn level to the file FLEET_BENCH_LOG
// names, if set.
func fleetLogger(b *testing.B) hclog.Logger {
	path := os.Getenv("FLEET_BENCH_LOG")
	if path == "" {
		return hclog.NewNullLogger()
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return hclog.New(&hclog.LoggerOptions{Output: f, Level: hclog.LevelFromString(os.Getenv("FLEET_BENCH_LOG_LEVEL"))})
}

// raiseNoFile lifts the soft open-file limit towards want, within the hard
// limit.
func raiseNoFile(b *testing.B, want uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= want {
		return
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Logf("cannot raise RLIMIT_NOFILE to %d: %v", lim.Cur, err)
	}
}

// instantRuntime replaces at once and is always healthy: the benchmark
// measures coordination, not workloads.
type instantRuntime struct {
	mu  sync.Mutex
	sha string
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
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sha = sha
	return nil
}

func (r *instantRuntime) WaitHealthy(context.Context, *hashspec.Spec) error { return nil }
func (r *instantRuntime) Finish(context.Context) error                      { return nil }
func (r *instantRuntime) Restore(context.Context, string) error             { return nil }
func (r *instantRuntime) Healthy(context.Context) (bool, string)            { return true, "" }

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
	b       *testing.B
	srv     *consultest.Server
	clients []*consultest.Server // the agents' Consul agents; srv when empty
	fc      fleetCase
	group   string
	store   *coordinator.Store // the harness's own, uncounted
	traffic *fleetTraffic
	log     hclog.Logger
	cancel  context.CancelFunc
	running sync.WaitGroup

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

// fleetSpec is the group's spec for release, at max_parallel k.
func fleetSpec(b *testing.B, group, release string, k int) *hashspec.Spec {
	js := fmt.Sprintf(`{"name":%q,"container":{"image":"fleet-bench:%s"},"update":{"max_parallel":%d,"min_healthy_time":"1s"}}`,
		group, release, k)
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "fleet spec")
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func (f *benchFleet) commit(release string) string {
	f.b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := f.store.Commit(ctx, f.group, fleetSpec(f.b, f.group, release, f.fc.k), "bench", release)
	if err != nil {
		f.b.Fatal(err)
	}
	return res.SHA
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
		rt := &instantRuntime{sha: sha}
		cfg := agent.Config{Group: f.group, Node: node, Store: nil,
			Runtime: rt, Metrics: &fleetMetrics{f: f}, Logger: f.log, SessionTTL: fleetSessionTTL}
		if checks != nil {
			checks.Handle("/"+node+"/health", agent.HealthHandler(rt))
			checks.Handle("/"+node+"/alive", agent.AliveHandler())
			cfg.HealthURL, cfg.AliveURL = f.checksURL+"/"+node+"/health", f.checksURL+"/"+node+"/alive"
		}
		if f.fc.noMirror {
			cfg = agent.WithoutStateMirror(cfg)
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

// fleetResult is one case's row.
type fleetResult struct {
	fleetCase
	wall, bound time.Duration
	// boundClient is the bound timed through a client agent, for the rows
	// whose agents reach the server through client agents, as on a fleet.
	boundClient time.Duration
	turns       int
	counts      fleetCounts
	raft        uint64
	perRelease  float64
	span        fleetSpan // what perRelease is measured over
	note        string
	// handoff is the median of release → next grant, hold of grant →
	// release: where a K=1 rollout's time goes.
	handoff, hold time.Duration
	// firstGrant is when the first slot was granted, after the commit:
	// the time every agent needs to notice the commit and line up.
	firstGrant time.Duration
	// kb is the JSON read per node, in KB, by bytesKindOf.
	kb [bytesKinds]float64
	// slowLive is the longest TTL check pass: the shared Consul agent
	// stalls its local endpoints while its anti-entropy syncs.
	slowLive time.Duration
	// liveStuck counts the liveness requests still in flight when the
	// case ended: slowLive counts them as lasting until then.
	liveStuck int
	// busyAgents and busyConsul are the cores this process (the agents)
	// and the Consul agents kept busy from the commit to the last turn:
	// their sum near GOMAXPROCS means the machine, not a wait, paced it.
	busyAgents, busyConsul float64
	// endpoints counts the requests by what they are for (endpointOf).
	endpoints map[string]int64
}

// turnTimes returns the median hold and, in grant order, the median time
// from one release to the next grant, which at K=1 is the handoff.
func turnTimes(turns []fleetTurn) (handoff, hold time.Duration) {
	slices.SortFunc(turns, func(a, b fleetTurn) int { return int(a.granted - b.granted) })
	var hs, ho []time.Duration
	for i, t := range turns {
		ho = append(ho, t.released-t.granted)
		if i > 0 {
			hs = append(hs, t.granted-turns[i-1].released)
		}
	}
	return median(hs), median(ho)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// runFleetCase times the lower bound, brings up the fleet converged on v1,
// and rolls it to v2.
func runFleetCase(b *testing.B, srv *consultest.Server, clients []*consultest.Server, fc fleetCase, run int) *fleetResult {
	f := &benchFleet{b: b, srv: srv, clients: clients, fc: fc, group: fmt.Sprintf("fleet-%d-k%d-c%d-ttl%t-nm%t-r%d", fc.n, fc.k, fc.clients, fc.ttl, fc.noMirror, run+1),
		store: coordinator.NewStore(srv.Client(), ""), traffic: &fleetTraffic{}, turned: make(chan struct{}, 1),
		log: fleetLogger(b)}
	r := &fleetResult{fleetCase: fc}
	r.bound = casBound(b, srv.Client(), "bench-fleet/"+f.group+"/bound", 3*fc.n)
	if len(clients) > 0 {
		r.boundClient = casBound(b, clients[0].Client(), "bench-fleet/"+f.group+"/bound-client", 3*fc.n)
	}
	v1 := f.commit("v1")
	f.startAgents(v1)
	defer f.stopAgents()
	f.converged(v1, 5*time.Minute)
	if err := f.traffic.waitQuiet(time.Second, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	f.roll(r)
	return r
}

// roll commits v2 and counts every request and raft write from the commit
// until every node has had its turn and the fleet is quiet again.
func (f *benchFleet) roll(r *fleetResult) {
	c := f.srv.Client()
	raft0, err := raftIndex(c)
	if err != nil {
		f.b.Fatal(err)
	}
	f.mu.Lock()
	f.start = time.Now()
	f.mu.Unlock()
	f.traffic.record(f.start)
	prof := profileConsul(f.b, f.profiled())
	agents0, consul0 := f.fleetCPU()
	f.commit("v2")
	if err := f.awaitTurns(f.fc.n, fleetRolloutCap); err != nil {
		r.note = err.Error()
		f.b.Error(err)
	}
	agents1, consul1 := f.fleetCPU()
	took := time.Since(f.start).Seconds()
	r.busyAgents, r.busyConsul = (agents1-agents0).Seconds()/took, (consul1-consul0).Seconds()/took
	if err := f.traffic.waitQuiet(time.Second, 2*time.Minute); err != nil {
		f.b.Error(err)
	}
	prof()
	evs, endpoints := f.traffic.stop()
	raft1, err := raftIndex(c)
	if err != nil {
		f.b.Fatal(err)
	}
	f.mu.Lock()
	turns, bad := slices.Clone(f.turns), slices.Clone(f.bad)
	f.mu.Unlock()
	if len(bad) > 0 {
		// Stopped by their fence (a lost session, say) and tried again: safe,
		// but worth seeing.
		r.note = strings.TrimSpace(fmt.Sprintf("%s %d turns did not succeed and were tried again: %v", r.note, len(bad), bad))
	}
	r.raft, r.endpoints = raft1-raft0, endpoints
	r.slowLive, r.liveStuck = f.traffic.slowestLive()
	for i := range r.kb {
		r.kb[i] = float64(f.traffic.bytes[i].Load()) / 1024 / float64(f.fc.n)
	}
	r.fill(turns, evs)
}

// fill derives the row's times and counts from the turns and requests.
func (r *fleetResult) fill(turns []fleetTurn, evs []fleetEvent) {
	r.firstGrant = fleetRolloutCap
	for _, t := range turns {
		r.wall = max(r.wall, t.released)
		r.firstGrant = min(r.firstGrant, t.granted)
	}
	r.turns, r.counts = len(turns), countEvents(evs)
	r.span = lineSpan(evs, turns)
	r.perRelease = readsPerRelease(evs, r.span)
	r.handoff, r.hold = turnTimes(turns)
}
