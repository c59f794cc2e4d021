package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// stallingRuntime is a recordingRuntime whose Prepare, a pull from a
// registry that stalls, returns only when its context ends.
type stallingRuntime struct {
	*recordingRuntime
	pulling chan struct{} // closed when the first Prepare starts
}

// Healthy says the workload crashed: a node down reclaims its slot and
// replaces at once.
func (r *stallingRuntime) Healthy(context.Context) (bool, string) { return false, "test: crashed" }

func (r *stallingRuntime) Prepare(ctx context.Context, _ *hashspec.Spec, _ string) error {
	r.record("Prepare")
	select {
	case <-r.pulling:
	default:
		close(r.pulling)
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

// A stop (systemctl stop) while the agent pulls under its slot: the pull
// touches nothing, so it is cut off and the slot goes back at once, with
// nothing destructive done and no failure counted. Before, the pull ran on
// to its own bound (minutes, a stalled registry's), the stop waited for it,
// and systemd killed the agent or a restart came too early (nemesis seed
// 699478818: the agent of w1 exited two minutes after its stop, long
// after its start had been asked for, and never came back).
func TestStopCutsOffAPullUnderTheSlot(t *testing.T) {
	g := groupkit.New(t, "prepstop")
	st, group, k := g.Store, g.Name, g.Keys
	v0 := commitRecording(t, st, group, "v0", "")
	commitRecording(t, st, group, "v1", "")
	// n1 runs v0, crashed, and kept its slot while down (a claim of its
	// own): its next process reclaims the slot and, the workload down,
	// replaces it at once, preparing v1 under the slot.
	putClaim(t, g.Client, k, "n1", "test")
	rt := &stallingRuntime{recordingRuntime: &recordingRuntime{sha: v0}, pulling: make(chan struct{})}
	p := startAgent(t, st, group, "n1", rt, agent.Allow{})
	testkit.Eventually(t, time.Minute, "n1 to pull under its slot", func() bool {
		select {
		case <-rt.pulling:
			return true
		default:
			return false
		}
	})
	p.stop(t) // fails the test unless Run returns within 30 s
	n := nodeState(t, st, group, "n1")
	if n == nil || n.State != coordinator.StateWaiting || !strings.Contains(n.Error, "stopped while it prepared") {
		t.Fatalf("n1's record after the stop: %+v; want waiting, the pull cut off by the stop", n)
	}
	if counted(t, st, group, "n1") {
		t.Fatal("n1 still counts against max_parallel after its pull was cut off: nothing was touched, its slot goes back")
	}
	noFailureCounted(t, st, group, "a pull cut off by a stop")
	if calls := rt.Calls(); slices.Contains(calls, "Replace") || slices.Contains(calls, "Restore") {
		t.Fatalf("the agent replaced or restored after its pull was cut off; calls: %v", calls)
	}
}
