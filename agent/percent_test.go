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
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// latchRuntime holds every step towards one SHA, once past its fence,
// until the test opens the latch: the node keeps its slot meanwhile.
type latchRuntime struct {
	*recordingRuntime
	mu     sync.Mutex
	sha    string
	latch  chan struct{}
	atGate bool // a step waits at the latch
}

func (r *latchRuntime) waiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.atGate
}

func (r *latchRuntime) hold(sha string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sha = sha
}

func (r *latchRuntime) Replace(ctx context.Context, s *hashspec.Spec, sha string, step agent.StepFunc) error {
	return r.recordingRuntime.Replace(ctx, s, sha, func(ctx context.Context, name string) error {
		if err := step(ctx, name); err != nil {
			return err
		}
		r.mu.Lock()
		held := r.sha == sha
		r.atGate = held
		r.mu.Unlock()
		if !held {
			return nil
		}
		defer func() {
			r.mu.Lock()
			r.atGate = false
			r.mu.Unlock()
		}()
		select {
		case <-r.latch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// percentFleet is in-process agents of a fresh group, each with a latch.
type percentFleet struct {
	t      *testing.T
	g      *groupkit.Group
	rts    map[string]*latchRuntime
	agents map[string]*inProcAgent
	held   string // the SHA whose steps the latches hold
}

func newPercentFleet(t *testing.T, nodes []string) (*percentFleet, string) {
	f := &percentFleet{t: t, g: groupkit.New(t, "percent"), rts: map[string]*latchRuntime{}, agents: map[string]*inProcAgent{}}
	v1 := commitRecording(t, f.g.Store, f.g.Name, "v1", "")
	for _, n := range nodes {
		f.start(n)
	}
	f.waitConverged(nodes, v1)
	return f, v1
}

func (f *percentFleet) start(n string) {
	f.rts[n] = &latchRuntime{recordingRuntime: &recordingRuntime{}, latch: make(chan struct{}), sha: f.held}
	f.agents[n] = startAgent(f.t, coordinator.NewStore(f.g.Client, ""), f.g.Name, n, f.rts[n], agent.Allow{})
}

// open lets the steps of nodes go on.
func (f *percentFleet) open(nodes ...string) {
	for _, n := range nodes {
		close(f.rts[n].latch)
	}
}

// atLatch names the nodes whose step waits at its latch.
func (f *percentFleet) atLatch() []string {
	var out []string
	for n, rt := range f.rts {
		if rt.waiting() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (f *percentFleet) waitConverged(nodes []string, sha string) {
	for _, n := range nodes {
		waitNode(f.t, f.g.Store, f.g.Name, n, "converged on "+sha[:12], func(s *coordinator.NodeState) bool {
			return s.SHA == sha && s.State == coordinator.StateConverged
		})
	}
}

// commitHeld commits release with max_parallel policy, every node's step
// towards it held at the latch.
func (f *percentFleet) commitHeld(ctx context.Context, release string, policy hashspec.Amount) string {
	s := recordingSpec(f.t, f.g.Name, release, "")
	s.Update.MaxParallel = policy
	sha, err := s.SHA()
	if err != nil {
		f.t.Fatal(err)
	}
	f.held = sha
	for _, rt := range f.rts {
		rt.hold(sha)
	}
	if _, err := f.g.Store.Commit(ctx, f.g.Name, s, "test", "commit "+release); err != nil {
		f.t.Fatal(err)
	}
	return sha
}

// peak is the most holders the watch of Consul's holders record saw at
// once, at a grant or a release seen before until (zero: ever).
func peakUntil(w *holdersWatch, until time.Time) int {
	events, _ := w.seen()
	most := 0
	for _, e := range events {
		if until.IsZero() || e.at.Before(until) {
			most = max(most, e.holders)
		}
	}
	return most
}

func peak(w *holdersWatch) int { return peakUntil(w, time.Time{}) }

func waitHolders(t *testing.T, w *holdersWatch, n int, what string) {
	t.Helper()
	testkit.Eventually(t, time.Minute, what, func() bool { return peak(w) >= n })
}

// A group of 4 under max_parallel = "50%": as Consul's holders record
// shows, 2 nodes hold at once while their steps are held, never more,
// and the rollout finishes.
func TestPercentHalfOfFour(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	f, _ := newPercentFleet(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := watchHolders(ctx, t, f.g.Client, f.g.Name)
	v2 := f.commitHeld(ctx, "v2", hashspec.Percent(50))
	waitHolders(t, w, 2, "2 of 4 nodes holding")
	gs, err := f.g.Store.Read(ctx, f.g.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := gs.Gate(); v.MaxParallel != 2 || v.Nodes != 4 || v.Policy != hashspec.Percent(50) {
		t.Errorf("gate %+v: want 50%% of 4 nodes, K 2", v)
	}
	f.open(nodes...)
	f.waitConverged(nodes, v2)
	if p := peak(w); p != 2 {
		t.Errorf("at most %d nodes held at once, want 2 (50%% of 4)", p)
	}
}

// A group of 2 under "50%" holds 1 at a time; 2 more nodes join (their
// records first, their agents later) while the first holds: the node in
// line, whose look counted 2, looks again and takes K = 2 of 4 with the
// first node's step still held, and never more than 2 hold at once.
func TestPercentGroupGrowsMidRollout(t *testing.T) {
	f, _ := newPercentFleet(t, []string{"n1", "n2"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := watchHolders(ctx, t, f.g.Client, f.g.Name)
	v2 := f.commitHeld(ctx, "v2", hashspec.Percent(50))
	var first []string
	testkit.Eventually(t, time.Minute, "1 of 2 nodes held at its latch", func() bool {
		first = f.atLatch()
		return len(first) == 1
	})
	grew := time.Now()
	for _, n := range []string{"n3", "n4"} {
		if err := f.g.Store.PutNode(ctx, f.g.Name, coordinator.NodeState{Node: n, Desired: v2, State: coordinator.StateWaiting, Since: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, time.Minute, "n1 and n2 held at their latches once the group grew", func() bool {
		return slices.Equal(f.atLatch(), []string{"n1", "n2"})
	})
	if p := peakUntil(w, grew); p != 1 {
		t.Errorf("%d nodes held at once in the group of 2 under 50%%, want 1", p)
	}
	f.start("n3")
	f.start("n4")
	f.open("n1", "n2", "n3", "n4")
	f.waitConverged([]string{"n1", "n2", "n3", "n4"}, v2)
	if p := peak(w); p != 2 {
		t.Errorf("at most %d nodes held at once, want 2 (50%% of 4)", p)
	}
}

// A group of 4 under "50%" shrinks to 3 by `node rm` of a node in line
// while 2 hold: holds are not taken back, but no grant is made at K = 2
// after it. With one holder done, the next node waits for the other (K =
// 1 of 3), as Consul's holders record shows, and the rollout finishes.
func TestPercentGroupShrinksMidRollout(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	f, _ := newPercentFleet(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := watchHolders(ctx, t, f.g.Client, f.g.Name)
	v2 := f.commitHeld(ctx, "v2", hashspec.Percent(50))
	var holding []string
	testkit.Eventually(t, time.Minute, "2 nodes held at their latch", func() bool {
		holding = f.atLatch()
		return len(holding) == 2
	})
	var gone string
	for _, n := range nodes {
		if !slices.Contains(holding, n) {
			gone = n
		}
	}
	f.agents[gone].stop(t)
	shrank := time.Now()
	if _, err := f.g.Store.RemoveNode(ctx, f.g.Name, gone, true, "test", "shrink mid-rollout"); err != nil {
		t.Fatal(err)
	}
	f.open(holding[0])
	waitNode(t, f.g.Store, f.g.Name, holding[0], "converged on v2", func(s *coordinator.NodeState) bool {
		return s.SHA == v2 && s.State == coordinator.StateConverged
	})
	rest := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == gone || slices.Contains(holding, n) })
	f.open(holding[1])
	f.open(rest...)
	f.waitConverged(append(holding, rest...), v2)
	events, _ := w.seen()
	grants := 0
	for _, e := range events {
		if e.release || e.at.Before(shrank) {
			continue
		}
		grants++
		if e.holders > 1 {
			t.Errorf("%s granted with %d holders after the group shrank to 3 (K = 1 of 3)", e.node, e.holders)
		}
	}
	if grants == 0 {
		t.Errorf("no grant seen after the shrink: %v", events)
	}
}
