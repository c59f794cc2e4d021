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
	// held, when set, keeps each replacement in its step, under its slot,
	// until it is closed.
	held chan struct{}
}

// newTimed is a timedRuntime whose replacement takes slow.
func newTimed(slow time.Duration) *timedRuntime {
	return &timedRuntime{recordingRuntime: &recordingRuntime{}, slow: slow, began: map[string]time.Time{}}
}

// holdSteps keeps every replacement that begins from now in its step
// until the returned func is called.
func (r *timedRuntime) holdSteps() (release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held = make(chan struct{})
	return sync.OnceFunc(func() { close(r.held) })
}

func (r *timedRuntime) Replace(ctx context.Context, s *hashspec.Spec, sha string, step agent.StepFunc) error {
	return r.recordingRuntime.Replace(ctx, s, sha, func(ctx context.Context, name string) error {
		if err := step(ctx, name); err != nil {
			return err
		}
		r.mu.Lock()
		r.began[sha] = time.Now()
		held := r.held
		r.mu.Unlock()
		time.Sleep(r.slow)
		if held != nil {
			select {
			case <-held:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
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
	return newWindowFleetOn(t, groupkit.New(t, "window"), nodes, slow)
}

// newWindowFleetOn is newWindowFleet of group g: several groups on one
// Consul agent.
func newWindowFleetOn(t *testing.T, g *groupkit.Group, nodes []string, slow time.Duration) *windowFleet {
	return startWindowFleet(t, g, nodes, slow, (*windowFleet).start)
}

// newStaggerFleet is newWindowFleet whose agents each have a store of
// their own, as agents on their own hosts do: each counts a stagger from
// its own sight of a release.
func newStaggerFleet(t *testing.T, nodes []string, slow time.Duration) *windowFleet {
	return startWindowFleet(t, groupkit.New(t, "stagger"), nodes, slow, (*windowFleet).startOwn)
}

func (f *windowFleet) startOwn(n string) {
	f.agents[n] = startAgent(f.t, coordinator.NewStore(f.consul, ""), f.group, n, f.rts[n], agent.Allow{})
}

// startWindowFleet commits a first release to g and starts each node's
// agent with start, and waits until every node converged on it.
func startWindowFleet(t *testing.T, g *groupkit.Group, nodes []string, slow time.Duration, start func(*windowFleet, string)) *windowFleet {
	f := &windowFleet{t: t, st: g.Store, consul: g.Client, group: g.Name,
		rts: map[string]*timedRuntime{}, agents: map[string]*inProcAgent{}}
	v1 := commitRecording(t, f.st, f.group, "v1", "")
	for _, n := range nodes {
		f.rts[n] = newTimed(slow)
		start(f, n)
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
	return commitSpec(f.t, f.st, f.group, release, s)
}

func (f *windowFleet) waitConverged(nodes []string, sha string) {
	for _, n := range nodes {
		waitNode(f.t, f.st, f.group, n, "converged on "+sha[:12], func(s *coordinator.NodeState) bool {
			return s.SHA == sha && s.State == coordinator.StateConverged
		})
	}
}

func (f *windowFleet) state() *coordinator.GroupState {
	return readGroup(f.t, f.st, f.group)
}

// restartAll stops and starts again the agent of every node.
func (f *windowFleet) restartAll(nodes []string) {
	for _, n := range nodes {
		f.agents[n].stop(f.t)
		f.start(n)
	}
}

// beganFrom fails the test for every node whose replacement to sha did not
// begin, or began before from (when what happened).
func (f *windowFleet) beganFrom(nodes []string, sha string, from time.Time, what string) {
	f.t.Helper()
	for _, n := range nodes {
		if at, ok := f.rts[n].beganAt(sha); !ok || at.Before(from) {
			f.t.Errorf("%s began replacing at %s (ok %v), before %s at %s", n, at.Format(time.StampMilli), ok, what, from.Format(time.StampMilli))
		}
	}
}

// waitUIGate waits until the Consul service instance of each node (what
// the Consul UI lists) is tagged with the closed gate's state and carries
// a reason that begins with reason.
func (f *windowFleet) waitUIGate(nodes []string, state coordinator.GateState, reason string) {
	f.t.Helper()
	for _, n := range nodes {
		testkit.Eventually(f.t, time.Minute, n+"'s service to show the gate "+string(state), func() bool {
			es, _, err := f.consul.Health().Service(coordinator.ServiceName(f.group), "gate:"+string(state), false, nil)
			if err != nil {
				return false
			}
			for _, e := range es {
				if e.Service.Meta["node"] == n && e.Service.Meta["gate"] == string(state) && strings.HasPrefix(e.Service.Meta["reason"], reason) {
					return true
				}
			}
			return false
		})
	}
}
