package agent_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// gatedRuntime is a recordingRuntime whose next Replace, once armed, stops
// at a point the test chooses (before its step's fence, or after it) until
// the test lets it go on, and which records each step the agent let it
// take: "step <name>".
type gatedRuntime struct {
	*recordingRuntime
	mu      sync.Mutex
	armed   bool
	after   bool          // stop after the step's fence rather than before
	reached chan struct{} // closed when Replace stops
	proceed chan struct{} // closed by the test to let it go on
}

// arm makes the next Replace stop before its step's fence, or after it.
func (r *gatedRuntime) arm(after bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed, r.after = true, after
	r.reached, r.proceed = make(chan struct{}), make(chan struct{})
}

// stop blocks, if armed for this point, until the test lets it go on,
// for a minute at most.
func (r *gatedRuntime) stop(ctx context.Context, after bool) {
	r.mu.Lock()
	if !r.armed || r.after != after {
		r.mu.Unlock()
		return
	}
	r.armed = false
	reached, proceed := r.reached, r.proceed
	r.mu.Unlock()
	close(reached)
	select {
	case <-proceed:
	case <-ctx.Done():
	case <-time.After(time.Minute):
	}
}

func (r *gatedRuntime) Replace(ctx context.Context, spec *hashspec.Spec, sha string, step agent.StepFunc) error {
	return r.recordingRuntime.Replace(ctx, spec, sha, func(ctx context.Context, name string) error {
		r.stop(ctx, false)
		if err := step(ctx, name); err != nil {
			return err
		}
		r.record("step " + name)
		r.stop(ctx, true)
		return nil
	})
}

// waitReached waits for the armed Replace to stop.
func (r *gatedRuntime) waitReached(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	reached := r.reached
	r.mu.Unlock()
	select {
	case <-reached:
	case <-time.After(time.Minute):
		t.Fatal("the agent never began its step within a minute")
	}
}

func (r *gatedRuntime) goOn() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.proceed)
}

// gapMetrics takes the fence-to-step gaps the agent reports.
type gapMetrics struct {
	mu   sync.Mutex
	gaps []time.Duration
}

func (*gapMetrics) Replacement(string)     {}
func (*gapMetrics) SlotWait(time.Duration) {}
func (*gapMetrics) SlotHold(time.Duration) {}
func (*gapMetrics) Converged(bool)         {}
func (*gapMetrics) ConsulError()           {}
func (m *gapMetrics) FenceGap(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gaps = append(m.gaps, d)
}

func (m *gapMetrics) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.gaps)
}

// Issue 25 item 7: the grant counted as the first step's fence for a
// second, so a CANCEL that Consul applied after the grant, and that
// `rollagent cancel` reported recorded, did not stop the first step: the
// node ended converged on the cancelled SHA. Here the test sees the grant
// in Consul (the node's record turned "replacing" toward v2 by the grant's
// transaction, and n1 holding the slot), writes the CANCEL, and only then
// lets the runtime call its step: the step's own fence must refuse it.
func TestCancelRightAfterGrantStopsFirstStep(t *testing.T) {
	g := groupkit.New(t, "cancelgrant")
	st, group := g.Store, g.Name
	v1 := commitRecording(t, st, group, "v1", "")
	rt := &gatedRuntime{recordingRuntime: &recordingRuntime{}}
	startAgent(t, st, group, "n1", rt, agent.Allow{})
	waitNode(t, st, group, "n1", "converged on v1", converged(v1))
	rt.Calls()
	rt.arm(false)
	v2 := commitRecording(t, st, group, "v2", "")
	rt.waitReached(t)
	if n := nodeState(t, st, group, "n1"); n == nil || n.State != coordinator.StateReplacing || n.Desired != v2 || n.SHA != v1 {
		t.Fatalf("n1's record %+v, want the grant's: replacing from %.12s toward %.12s", n, v1, v2)
	}
	holdersOf(t, g, func(h *lockstep.Holders) string {
		if _, ok := groupkit.Holding(h, "n1"); !ok {
			return "n1 does not hold the slot"
		}
		return ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := st.Cancel(ctx, group, v2, "right after the grant", "test")
	cancel()
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	rt.goOn()
	g.WaitFor(30*time.Second, "n1's slot given back", func() bool { return slotFree(t, g, "n1") })
	calls := rt.Calls()
	if !slices.Contains(calls, "Replace") {
		t.Fatalf("the agent never began its first step, so this tested nothing; calls: %v", calls)
	}
	if got := rt.SHA(); got != v1 || slices.Contains(calls, "step swap") || slices.Contains(calls, "Finish") {
		t.Fatalf("the workload is %.12s, want %.12s untouched: the first step went ahead after the CANCEL; calls: %v", got, v1, calls)
	}
	if n := nodeState(t, st, group, "n1"); n == nil || n.SHA != v1 {
		t.Fatalf("n1's record %+v, want it on %.12s: not on the cancelled %.12s", n, v1, v2)
	}
}

// Every step is fenced by a transaction of its own, whose record names the
// step (what `cancel` and `status` read), and its fence-to-step gap is
// reported to the metrics.
func TestFirstStepFenceNamesStepAndReportsGap(t *testing.T) {
	g := groupkit.New(t, "fencegap")
	st, group := g.Store, g.Name
	v1 := commitRecording(t, st, group, "v1", "")
	rt := &gatedRuntime{recordingRuntime: &recordingRuntime{}}
	m := &gapMetrics{}
	startAgentWith(t, agent.Config{Group: group, Node: "n1", Store: st, Runtime: rt, Resync: time.Hour, Metrics: m})
	waitNode(t, st, group, "n1", "converged on v1", converged(v1))
	if got := m.count(); got != 1 {
		t.Fatalf("%d fence-to-step gaps reported for the first deploy's one step, want 1", got)
	}
	rt.arm(true)
	v2 := commitRecording(t, st, group, "v2", "")
	rt.waitReached(t)
	n := nodeState(t, st, group, "n1")
	rt.goOn()
	if n == nil || n.State != coordinator.StateReplacing || n.Desired != v2 || n.Fenced != "swap" {
		t.Fatalf("n1's record after its step's fence %+v, want replacing toward %.12s, fenced for \"swap\"", n, v2)
	}
	waitNode(t, st, group, "n1", "converged on v2", converged(v2))
	if got := m.count(); got != 2 {
		t.Fatalf("%d fence-to-step gaps reported for two steps, want 2", got)
	}
}
