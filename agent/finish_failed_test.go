package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
)

// finishFailsOnce is the exec runtime whose next Finish, once armed, fails
// without touching anything, as a removal of the old workload can (a full
// disk, a daemon that does not answer): the state file keeps the old SHA
// installed with the new one pending beside it, which is what the real
// Finish leaves when its write fails. Every other call is the real one.
type finishFailsOnce struct {
	*agent.Exec
	armed  atomic.Bool
	failed atomic.Int32
}

func (r *finishFailsOnce) Finish(ctx context.Context) error {
	if r.armed.CompareAndSwap(true, false) {
		r.failed.Add(1)
		return errors.New("test: the old workload could not be removed")
	}
	return r.Exec.Finish(ctx)
}

// A node converged on Y whose Finish failed keeps X set aside beside its
// healthy, verified Y. When desired moves on to Z, or is cancelled, X must
// never come back: the leftover is finished under the node's slot and Y is
// replaced by Z only there. On d2778cf (issue 20) the first look after the
// commit restored X at once, outside any slot and under a CANCEL alike.
// While the test holds the group's only slot, the node's runtime state must
// not move at all; after, its hook log must read X, Y, then Z alone.
func TestFinishFailedNodeIsNotRevertedWhenDesiredMovesOn(t *testing.T) {
	tests := []struct {
		name   string
		cancel bool // cancel Z, then commit another release
	}{
		{"desired moves on", false},
		{"desired cancelled, then moves on", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ef := newInProcExecFleet(t, "finish")
			rt := &finishFailsOnce{Exec: ef.runtime("n1", "")}
			startAgent(t, ef.store, ef.group, "n1", rt, agent.Allow{})
			x, y := ef.convergeWithFinishFailed(rt)

			release := ef.takeSlot()
			z := ef.commit(ef.spec("z", 1, "10s", nil))
			want := coordinator.StateWaiting // in line for the slot the test holds
			if tc.cancel {
				ef.cancel()
				want = coordinator.StateCancelled
			}
			waitNode(t, ef.store, ef.group, "n1", string(want)+" for z", func(n *coordinator.NodeState) bool {
				return n.Desired == z && n.State == want
			})
			ef.checkUntouched("n1", x, y, 3*time.Second)
			released := time.Now()
			release()
			final := z
			if tc.cancel {
				final = ef.commit(ef.spec("z2", 1, "10s", nil))
			}
			ef.waitFor(time.Minute, "n1 converged on the last release", func() bool {
				return ef.converged([]string{"n1"}, final)
			})
			ef.checkRunsAfter("n1", []string{x, y, final}, released)
		})
	}
}

// convergeWithFinishFailed installs X on n1, then Y with its Finish failing,
// and returns both once n1 reports converged on Y with X still set aside.
func (ef *execFleet) convergeWithFinishFailed(rt *finishFailsOnce) (x, y string) {
	t := ef.t
	t.Helper()
	x = ef.commit(ef.spec("x", 1, "10s", nil))
	ef.waitFor(time.Minute, "n1 converged on x", func() bool { return ef.converged([]string{"n1"}, x) })
	rt.armed.Store(true)
	y = ef.commit(ef.spec("y", 1, "10s", nil))
	waitNode(t, ef.store, ef.group, "n1", "converged on y", func(n *coordinator.NodeState) bool {
		return n.SHA == y && n.State == coordinator.StateConverged
	})
	sha, pending := ef.execState("n1")
	if rt.failed.Load() != 1 || sha != x || pending != y || !ef.hookInstalled("n1", y) {
		t.Fatalf("after y: %d Finish failures, state file sha=%.12s pending=%.12s: want one, with x set aside beside y",
			rt.failed.Load(), sha, pending)
	}
	return x, y
}

// checkUntouched checks for d that node's runtime state stays as Finish
// left it: x set aside, y installed, and the hook run for those two alone.
// The node holds no slot, so it may change nothing.
func (ef *execFleet) checkUntouched(node, x, y string, d time.Duration) {
	t := ef.t
	t.Helper()
	testkit.Steady(t, d, testkit.Every, func() error {
		sha, pending := ef.execState(node)
		runs := runSHAs(ef.hookRuns(node))
		if sha != x || pending != y || !ef.hookInstalled(node, y) || !slices.Equal(runs, []string{x, y}) {
			return fmt.Errorf("%s changed with no slot: state file sha=%.12s pending=%.12s, want %.12s beside %.12s; hook runs for %.12q",
				node, sha, pending, x, y, runs)
		}
		return nil
	})
}

// endedRuns is node's hook runs, each of which must have run to its end.
func (ef *execFleet) endedRuns(node string) []hookRun {
	ef.t.Helper()
	runs := ef.hookRuns(node)
	for _, r := range runs {
		if r.end.IsZero() {
			ef.t.Fatalf("%s: the hook run for %.12s was cut off; runs for %.12q", node, r.sha, runSHAs(runs))
		}
	}
	return runs
}

// runSHAs is the SHA of each run, in order.
func runSHAs(runs []hookRun) []string {
	shas := make([]string, len(runs))
	for i, r := range runs {
		shas[i] = r.sha
	}
	return shas
}

// checkRunsAfter checks that node's replace hook ran for want in order, each
// run complete, and the last one only once the slot was free, after since.
func (ef *execFleet) checkRunsAfter(node string, want []string, since time.Time) {
	t := ef.t
	t.Helper()
	runs := ef.endedRuns(node)
	got := runSHAs(runs)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: hook runs for %.12q, want %.12q: the old release must never be installed again", node, got, want)
	}
	if last := runs[len(runs)-1]; !last.begin.After(since) {
		t.Fatalf("%s: the hook for %.12s began %s before the slot was free", node, last.sha, since.Sub(last.begin))
	}
}
