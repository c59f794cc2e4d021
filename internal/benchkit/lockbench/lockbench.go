// Package lockbench is the harness of BenchmarkLockstep, which compares
// lockstep with `consul lock -n 1` and api.Semaphore on one Consul dev
// agent: handoff gap, wall time, Consul HTTP requests per handoff, and
// failover after a SIGKILLed holder.
//
// Each sub-benchmark does its work once, whatever b.N is, so -benchtime 1x
// is the intended setting. The Markdown table of results is printed at the
// end; set LOCKSTEP_BENCH_MD to a file, such as BENCHMARKS.md, to have it
// written there too, as the block "lockstep bench" (see benchkit.Report).
//
// lockbench does not import lockstep, whose own tests run it: lockstep
// lends it a turn and a failover try (Lockstep).
package lockbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

const (
	// HoldTime is how long an in-process holder works; cliHoldTime is the
	// `sleep 0.2` of a consul lock holder.
	HoldTime    = 20 * time.Millisecond
	cliHoldTime = 200 * time.Millisecond
	// runCap bounds one handoff run; contenders still waiting then are
	// stopped and the row says so.
	runCap = 3 * time.Minute
	// TryCap bounds one failover try.
	TryCap    = time.Minute
	failTries = 5
)

// cliNs are the contender counts of the consul lock CLI: a process each, so
// N=200 (about 8 GB of CLI processes) is left out.
var cliNs = []int{10, 50}

// ns are the contender counts of the in-process systems.
var ns = []int{10, 50, 200}

// hcl lifts the agent's cap of 200 HTTP connections per client IP: every
// contender here connects from 127.0.0.1, and at N=200 the waiters alone
// keep more than 200 blocking queries open. It applies to every system
// alike.
const hcl = `limits { http_max_conns_per_client = 4096 }`

// Turn is one lockstep contender's turn, as who.
type Turn func(ctx context.Context, who string) (Hold, error)

// FailoverTry is failover try i (of a few, one after another): it times a
// SIGKILLed holder to its successor's start; context.DeadlineExceeded when
// no successor started within TryCap.
type FailoverTry func(i int) (time.Duration, error)

// Lockstep is what lockstep lends the benchmark.
type Lockstep struct {
	// Round prepares the round named run (its gate, see PutDesired; its
	// slot is at Key(run, "slot")) and returns the turn its contenders
	// take.
	Round func(tb testing.TB, c *api.Client, run string) Turn
	// Failover prepares the failover tries on srv.
	Failover func(tb testing.TB, srv *consultest.Server) FailoverTry
}

// Benchmark runs every system at every N, then the failovers, and
// publishes the report.
func Benchmark(b *testing.B, ls Lockstep) {
	srv := consultest.New(b, consultest.Options{HCL: hcl})
	rep := &report{started: time.Now()}
	b.Run("handoff", func(b *testing.B) {
		// consul lock goes first, on a quiet agent: its requests are
		// counted from the agent's metrics, which cannot tell clients apart.
		for _, n := range cliNs {
			b.Run(fmt.Sprintf("consul-lock/N=%d", n), func(b *testing.B) {
				rep.add(b, cliHandoff(b, srv, n))
			})
		}
		for _, n := range ns {
			b.Run(fmt.Sprintf("api-semaphore/N=%d", n), func(b *testing.B) {
				rep.add(b, apiSemHandoff(b, srv, n))
			})
		}
		for _, n := range ns {
			b.Run(fmt.Sprintf("lockstep/N=%d", n), func(b *testing.B) {
				rep.add(b, lockstepHandoff(b, srv, n, ls.Round))
			})
		}
	})
	b.Run("failover", func(b *testing.B) {
		b.Run("lockstep", func(b *testing.B) { rep.addFailover(b, lockstepFailover(b, ls.Failover(b, srv))) })
		b.Run("consul-lock", func(b *testing.B) { rep.addFailover(b, cliFailover(b, srv)) })
	})
	rep.publish(b)
}

// Key is the key name of the round (or failover) named run.
func Key(run, name string) string { return "bench/" + run + "/" + name }

// Desired is a round's desired key, for its gate.
type Desired struct {
	Key    string
	Index  uint64
	Cancel string // a key whose presence closes the gate
}

// PutDesired writes the desired key of the round named run.
func PutDesired(tb testing.TB, c *api.Client, run string) Desired {
	tb.Helper()
	key := Key(run, "desired")
	if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte(run)}, nil); err != nil {
		tb.Fatal(err)
	}
	p, _, err := c.KV().Get(key, nil)
	if err != nil || p == nil {
		tb.Fatalf("read %s: %v", key, err)
	}
	return Desired{Key: key, Index: p.ModifyIndex, Cancel: Key(run, "cancel")}
}

// lockstepHandoff runs n in-process lockstep contenders of ls's turn.
func lockstepHandoff(b *testing.B, srv *consultest.Server, n int, round func(testing.TB, *api.Client, string) Turn) *result {
	c, ctr, closeIdle := countedClient(b, srv.HTTPAddr)
	defer closeIdle()
	r := run(b, c, ctr, "lockstep", "lockstep", n, HoldTime, func(ctx context.Context, run string) ([]Hold, []error, time.Duration) {
		turn := round(b, c, run)
		return contend(ctx, n, func(ctx context.Context, i int) (Hold, error) { return turn(ctx, name(i)) })
	})
	if r.overlap > 1 {
		b.Errorf("lockstep: %d fenced turns overlapped with K=1", r.overlap)
	}
	return r
}

func name(i int) string { return fmt.Sprintf("n%02d", i) }
