package agent_test

import (
	"testing"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/internal/benchkit/fleetbench"
)

// BenchmarkFleet rolls a new SHA across 100, 300 and 1,000 in-process
// agents and measures what the rollout costs Consul per node as N grows
// (internal/benchkit/fleetbench is its harness):
//
//	go test -run '^$' -bench Fleet -benchtime 1x -timeout 90m ./agent/
//
// FLEET_BENCH_RUNS runs each case more than once; set FLEET_BENCH_MD to a
// file to have the report written there too.
func BenchmarkFleet(b *testing.B) {
	fleetbench.Benchmark(b, fleetbench.Options{NoMirror: agent.WithoutStateMirror})
}

// BenchmarkFleetTimed rolls fleets whose replacements take time (issue 30,
// item 2) and reports wall time against ceil(N/K) × (T +
// min_healthy_time); FLEET_BENCH_MIN_HEALTHY sets min_healthy_time and
// FLEET_BENCH_MAX_N caps N for a quick try.
func BenchmarkFleetTimed(b *testing.B) {
	fleetbench.Timed(b, fleetbench.Options{NoMirror: agent.WithoutStateMirror})
}

// BenchmarkFleetCancel cancels a rollout with 1,000 nodes in line at K=10
// (issue 30, item 3): the time to an empty line, and no grant after the
// CANCEL's index.
func BenchmarkFleetCancel(b *testing.B) {
	fleetbench.Cancel(b, fleetbench.Options{NoMirror: agent.WithoutStateMirror})
}
