package agent_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// timedRuntime is a recordingRuntime whose replacement takes slow after
// its fence, and which notes when each replacement to a SHA began.
type timedRuntime struct {
	*recordingRuntime
	slow  time.Duration
	mu    sync.Mutex
	began map[string]time.Time // SHA -> when its replacement passed its fence
}

func (r *timedRuntime) Replace(ctx context.Context, s *hashspec.Spec, sha string, step agent.StepFunc) error {
	return r.recordingRuntime.Replace(ctx, s, sha, func(ctx context.Context, name string) error {
		if err := step(ctx, name); err != nil {
			return err
		}
		r.mu.Lock()
		r.began[sha] = time.Now()
		r.mu.Unlock()
		time.Sleep(r.slow)
		return nil
	})
}

func (r *timedRuntime) beganAt(sha string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.began[sha]
	return t, ok
}

// windowFleet runs n in-process agents of a fresh group, converged on a
// first release.
type windowFleet struct {
	t      *testing.T
	st     *coordinator.Store
	consul *api.Client // the dev agent every node runs on
	group  string
	rts    map[string]*timedRuntime
	agents map[string]*inProcAgent
}

func newWindowFleet(t *testing.T, nodes []string, slow time.Duration) *windowFleet {
	g := groupkit.New(t, "window")
	f := &windowFleet{t: t, st: g.Store, consul: g.Client, group: g.Name,
		rts: map[string]*timedRuntime{}, agents: map[string]*inProcAgent{}}
	v1 := commitRecording(t, f.st, f.group, "v1", "")
	for _, n := range nodes {
		f.rts[n] = &timedRuntime{recordingRuntime: &recordingRuntime{}, slow: slow, began: map[string]time.Time{}}
		f.start(n)
	}
	f.waitConverged(nodes, v1)
	return f
}

func (f *windowFleet) start(n string) {
	f.agents[n] = startAgent(f.t, f.st, f.group, n, f.rts[n], agent.Allow{})
}

// commit commits a release whose only window is w.
func (f *windowFleet) commit(release string, w hashspec.Window) string {
	s := recordingSpec(f.t, f.group, release, "")
	s.Update.Windows = []hashspec.Window{w}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := f.st.Commit(ctx, f.group, s, "test", "commit "+release)
	if err != nil {
		f.t.Fatal(err)
	}
	return r.SHA
}

func (f *windowFleet) waitConverged(nodes []string, sha string) {
	for _, n := range nodes {
		waitNode(f.t, f.st, f.group, n, "converged on "+sha[:12], func(s *coordinator.NodeState) bool {
			return s.SHA == sha && s.State == coordinator.StateConverged
		})
	}
}

// A rollout committed outside its maintenance window holds, through a
// restart of every agent: no node's replacement begins before the window
// opens, and every node says why it waits; once it opens, every node
// converges.
func TestWindowHoldsRolloutUntilItOpens(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	f := newWindowFleet(t, nodes, 0)
	opens := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if time.Until(opens) < 20*time.Second {
		opens = opens.Add(time.Minute)
	}
	v2 := f.commit("v2", hashspec.Window{Start: opens.Format("15:04"), Length: hashspec.Duration(time.Hour)})
	for _, n := range nodes {
		waitNode(t, f.st, f.group, n, "waiting outside the window", func(s *coordinator.NodeState) bool {
			return s.State == coordinator.StateWaiting && strings.HasPrefix(s.Error, "outside the maintenance window; the next opens")
		})
	}
	for _, n := range nodes {
		f.agents[n].stop(t)
		f.start(n)
	}
	// waitNode's bound is a minute from when the window opens.
	testkit.Eventually(t, 2*time.Minute, "the window to open", func() bool { return !time.Now().Before(opens) })
	f.waitConverged(nodes, v2)
	for _, n := range nodes {
		if at, ok := f.rts[n].beganAt(v2); !ok || at.Before(opens) {
			t.Errorf("%s began replacing at %s (ok %v), before the window opened at %s", n, at.Format(time.StampMilli), ok, opens.Format(time.StampMilli))
		}
	}
}

// A window that closes mid-rollout: the node mid-step finishes its step
// and converges, no replacement begins after the close (a node in line
// leaves it), and the nodes left say they wait for the next window.
func TestWindowClosedMidRolloutLetsTheHolderFinish(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	f := newWindowFleet(t, nodes, 6*time.Second)
	now := time.Now().UTC()
	start := now.Truncate(time.Minute)
	closes := now.Add(9 * time.Second)
	v2 := f.commit("v2", hashspec.Window{Start: start.Format("15:04"), Length: hashspec.Duration(closes.Sub(start))})
	// Three steps of 6 s do not fit in 9 s: at most two begin.
	var began, left []string
	testkit.Eventually(t, time.Minute, "the rollout to settle after the window closed", func() bool {
		if time.Now().Before(closes.Add(8 * time.Second)) {
			return false
		}
		began, left = nil, nil
		for _, n := range nodes {
			if _, ok := f.rts[n].beganAt(v2); ok {
				began = append(began, n)
			} else {
				left = append(left, n)
			}
		}
		return true
	})
	if len(began) == 0 || len(left) == 0 {
		t.Fatalf("began %v, left %v: want some of each", began, left)
	}
	f.waitConverged(began, v2)
	for _, n := range began {
		if at, _ := f.rts[n].beganAt(v2); !at.Before(closes) {
			t.Errorf("%s began replacing at %s, after the window closed at %s", n, at.Format(time.StampMilli), closes.Format(time.StampMilli))
		}
	}
	for _, n := range left {
		waitNode(t, f.st, f.group, n, "waiting for the next window", func(s *coordinator.NodeState) bool {
			return s.State == coordinator.StateWaiting && strings.HasPrefix(s.Error, "outside the maintenance window")
		})
	}
	gs := f.state()
	if gs.Holders != nil && len(gs.Holders.Holding)+len(gs.Holders.Waiting) > 0 {
		t.Errorf("outside the window, holders %v and waiters %v remain", gs.Holders.Holding, gs.Holders.Waiting)
	}
}

func (f *windowFleet) state() *coordinator.GroupState {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := f.st.Read(ctx, f.group, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return gs
}

// An agent stopped mid-step finishes or undoes the step, and its record
// says how the step ended, not the fence's "replacing", with the stop
// mark.
func TestStopMidStepFinishesAndSaysSo(t *testing.T) {
	f := newWindowFleet(t, []string{"n1"}, 3*time.Second)
	v2 := commitRecording(t, f.st, f.group, "v2", "")
	testkit.Eventually(t, time.Minute, "n1's replacement to begin", func() bool {
		_, ok := f.rts["n1"].beganAt(v2)
		return ok
	})
	f.agents["n1"].stop(t)
	n := nodeState(t, f.st, f.group, "n1")
	if n == nil || n.State == coordinator.StateReplacing || n.State == coordinator.StateVerifying || n.Stopped == nil {
		t.Fatalf("record after a stop mid-step: %+v; want how the step ended, with the stop mark", n)
	}
}
