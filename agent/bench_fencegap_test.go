package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/benchkit/agentbench"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// fenceGapRollouts is how many replacements BenchmarkAgentFenceGap times,
// two steps each.
const fenceGapRollouts = 50

// twoStepRuntime takes two fenced steps per replacement, as the Docker
// runtime does with the default stop-first order.
type twoStepRuntime struct{ *recordingRuntime }

func (r twoStepRuntime) Replace(ctx context.Context, spec *hashspec.Spec, sha string, step agent.StepFunc) error {
	if err := step(ctx, "set old container aside"); err != nil {
		return err
	}
	return r.recordingRuntime.Replace(ctx, spec, sha, func(ctx context.Context, _ string) error {
		return step(ctx, "start new container")
	})
}

// BenchmarkAgentFenceGap times the fence-to-step gap, what a CANCEL cannot
// stop: from a fence's transaction returning OK to the runtime being let
// take its step, which the Docker runtime issues as its next call. One
// agent on a Consul dev agent, logging at info to a file as `rollagent
// run` does by default, replaces its workload fenceGapRollouts times.
func BenchmarkAgentFenceGap(b *testing.B) {
	srv := consultest.NewDev(b)
	st := coordinator.NewStore(srv.Client(), "")
	group := fleettest.Group("fencegap")
	logf, err := os.Create(filepath.Join(b.TempDir(), "agent.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	m := &gapMetrics{}
	a, err := agent.New(agent.Config{Group: group, Node: "n1", Store: st, Runtime: twoStepRuntime{&recordingRuntime{}},
		Resync: time.Hour, Metrics: m, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logf})})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for i := range fenceGapRollouts {
		sha := agentbench.Commit(b, st, group, fmt.Sprintf("example.com/app:v%d", i), "")
		fleettest.WaitFor(b, time.Minute, fmt.Sprintf("n1 converged on v%d", i), func() bool {
			n := nodeState(b, st, group, "n1")
			return n != nil && n.State == coordinator.StateConverged && n.SHA == sha
		})
	}
	m.mu.Lock()
	gaps := slices.Clone(m.gaps)
	m.mu.Unlock()
	slices.Sort(gaps)
	if len(gaps) == 0 {
		b.Fatal("no fence-to-step gap was reported")
	}
	rank := func(q float64) time.Duration { return benchkit.Quantile(gaps, q) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(rank(0.5).Microseconds()), "gap-p50-µs")
	b.ReportMetric(float64(rank(0.99).Microseconds()), "gap-p99-µs")
	b.ReportMetric(float64(gaps[len(gaps)-1].Microseconds()), "gap-max-µs")
	b.Logf("%d fence-to-step gaps: p50 %s, p99 %s, max %s", len(gaps), rank(0.5), rank(0.99), gaps[len(gaps)-1])
}
