package agent_test

// Benchmarks of real `rollagent run` processes with the exec runtime
// (internal/benchkit/agentbench is their harness). Run them all at once:
//
//	go test -run '^$' -bench 'BenchmarkAgent(Failover|Cancel|Idle|FenceGap)' -benchtime 1x -timeout 30m ./agent/
//
// Set AGENT_BENCH_MD to a file, such as BENCHMARKS.md, to have their
// Markdown blocks written there too.

import (
	"testing"

	"github.com/rollagent/rollagent/internal/benchkit/agentbench"
)

// BenchmarkAgentFailover times a SIGKILLed slot holder (its agent, or its
// whole node) to the next node's replacement beginning, on 10 agents each
// on its own Consul client agent.
func BenchmarkAgentFailover(b *testing.B) { agentbench.Failover(b) }

// BenchmarkAgentCancel times `rollagent cancel` to every waiter leaving the
// line and publishing "cancelled", on 10 agents, and checks from the
// records that nothing started after the CANCEL.
func BenchmarkAgentCancel(b *testing.B) { agentbench.Cancel(b) }

// BenchmarkAgentIdle observes the memory, CPU and Consul requests of
// converged agents for a minute, beside a Consul client agent and an idle
// Go HTTP server.
func BenchmarkAgentIdle(b *testing.B) { agentbench.Idle(b) }
