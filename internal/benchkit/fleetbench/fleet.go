// Package fleetbench is the harness of BenchmarkFleet, which rolls a new
// SHA across 100, 300 and 1,000 in-process agents (agent.New, each with its
// own Consul client and a runtime that replaces at once) against one Consul
// dev agent on loopback (a fresh one for each case), and measures what the
// rollout costs Consul per node as N grows. The shared agent holds
// every node's session checks and service, which a real fleet spreads over
// a Consul agent per node; its anti-entropy then does O(N) work per change
// under one lock. So the 1,000-node cases run a second time with the nodes
// spread over fleetClientAgents client agents joined to the dev agent, and
// a third time on a cluster of clusterServers servers with clusterClients
// client agents (issue 30, item 5), which run alone with
// -bench 'Fleet$/N=1000/K=/servers=3':
//
//	go test -run '^$' -bench Fleet -benchtime 1x -timeout 90m ./agent/
//
// Each case rolls once per run (FLEET_BENCH_RUNS, default 1), whatever b.N
// is. The Markdown table of results is printed at the end; set
// FLEET_BENCH_MD to a file to have it written there too, as the block
// "fleet bench".
package fleetbench

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
)

// fleetCase is one rollout: n agents at max_parallel k, talking to the dev
// agent, or when clients is set, spread evenly over that many client agents.
// Its agents serve their workload's health and their liveness over HTTP for
// the Consul agent to check, as `rollagent run` does by default, unless ttl:
// then they pass TTL checks themselves, as with --health-addr=off, and make
// a session per rollout. A noMirror case keeps each node's state out of its
// Consul service (agent.WithoutStateMirror), which `rollagent run` never
// does: it shows what that mirror, which the Consul UI shows, costs.
//
// A paced case (healthy set) runs the timed runtime: each replacement
// takes replace and the new workload reports healthy after healthy, its
// min_healthy_time (BenchmarkFleetTimed).
//
// A case with servers set runs on that many Consul servers (persistent,
// bootstrap_expect = servers) instead of a dev agent, its nodes spread
// over clients client agents joined to them all.
type fleetCase struct {
	n, k, clients    int
	servers          int
	ttl, noMirror    bool
	replace, healthy time.Duration
}

func (fc fleetCase) paced() bool { return fc.healthy > 0 }

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
	{n: 300, k: 1, noMirror: true}, {n: 1000, k: 1, noMirror: true},
	{n: 1000, k: 1, servers: clusterServers, clients: clusterClients}, {n: 1000, k: 10, servers: clusterServers, clients: clusterClients}}

// fleetClientAgents is how many client agents the spread cases use: 100
// nodes each, about what one shared agent carried well at N=100.
const fleetClientAgents = 10

func (fc fleetCase) name() string {
	name := fmt.Sprintf("N=%d/K=%d/shared", fc.n, fc.k)
	switch {
	case fc.servers > 0:
		name = fmt.Sprintf("N=%d/K=%d/servers=%d/clients=%d", fc.n, fc.k, fc.servers, fc.clients)
	case fc.clients > 0:
		name = fmt.Sprintf("N=%d/K=%d/clients=%d", fc.n, fc.k, fc.clients)
	}
	if fc.ttl {
		name += "/ttl"
	}
	if fc.noMirror {
		name += "/no-mirror"
	}
	if fc.paced() {
		name += fmt.Sprintf("/T=%s/mht=%s", fc.replace, fc.healthy)
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

// Options is what agent's tests lend the benchmark.
type Options struct {
	// NoMirror returns an agent's config with its state kept out of its
	// Consul service, for the no-mirror cases (agent.WithoutStateMirror,
	// which only agent's tests can reach).
	NoMirror func(agent.Config) agent.Config
}

// Benchmark runs every case FLEET_BENCH_RUNS times and publishes the
// report.
func Benchmark(b *testing.B, opts Options) {
	raiseNoFile(b, fleetNoFile)
	rep := &fleetReport{started: time.Now(), runs: fleetRuns(b)}
	for run := range rep.runs {
		for _, fc := range fleetCases {
			b.Run(fmt.Sprintf("%s/run=%d", fc.name(), run+1), func(b *testing.B) {
				// A fresh Consul for each case, stopped at its end: a Consul
				// agent that has just seen 1,000 services and checks go is
				// slow for a while, and a case's figures should not depend
				// on the cases run before it.
				rep.add(b, runFleetCase(b, startConsul(b, fc), fc, run, opts))
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
