package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// crashLoop kills the process of container id through the kernel, as a
// workload that crashes by itself (docker kill would mark it stopped by
// hand), whenever it runs, until it has been restarted restarts times or
// stop is closed. Docker restarts it under its restart policy with growing
// delays, so after a few kills it spends most of its time in "Restarting".
// It kills by ID: the new container a replacement starts under the managed
// name is never touched. done is closed when it returns.
func (f *fleet) crashLoop(id string, restarts int, stop <-chan struct{}) (done <-chan struct{}) {
	d := make(chan struct{})
	go func() {
		defer close(d)
		for range 600 { // bounded: 60 s at most
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			insp, err := f.docker.ContainerInspect(ctx, id)
			cancel()
			if err != nil || insp.State == nil || insp.RestartCount >= restarts && restarts > 0 && insp.State.Restarting {
				return
			}
			if insp.State.Running && !insp.State.Restarting && insp.State.Pid > 0 {
				if err := syscall.Kill(insp.State.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					f.t.Errorf("kill %d: %v", insp.State.Pid, err)
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return d
}

// restarting says Docker shows container id waiting out its restart
// policy's delay: not running, and to be started again by Docker.
func (f *fleet) restarting(id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	insp, err := f.docker.ContainerInspect(ctx, id)
	return err == nil && insp.State != nil && insp.State.Restarting
}

// A node converged on v1 whose workload crash-loops, and a good v2
// committed (failure_action pause, max_failures 1) while Docker still waits
// to restart the old container: nothing of v2 has run, so no failure may be
// charged to it, and the node converges on v2. Docker refuses to rename a
// container in its restart delay ("sandbox not found"): the replacement
// must not take that refusal for v2's failure.
func TestACrashLoopingNodeTakesAGoodCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		// ended: the crash loop ended before the commit, with the old
		// container's restart pending; otherwise it goes on after it.
		ended bool
	}{
		{name: "crash loop ended, restart pending", ended: true},
		{name: "still crash-looping", ended: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ns, _ := deployed(t, "crashloop", 1)
			old := f.workloads()["n1"].Managed
			stop := make(chan struct{})
			restarts := 5 // Docker's delay doubles from 100ms: 1.6 s by now
			if !tc.ended {
				restarts = 0 // until stopped
			}
			done := f.crashLoop(old, restarts, stop)
			defer func() { close(stop); <-done }()
			if tc.ended {
				<-done
			} else {
				f.waitFor(30*time.Second, "the old container restarted 3 times", func() bool {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					insp, err := f.docker.ContainerInspect(ctx, old)
					return err == nil && insp.RestartCount >= 3
				})
			}
			f.waitFor(30*time.Second, "the old container in its restart delay", func() bool { return f.restarting(old) })
			v2 := f.commit(f.spec(f.image("v2", nil), 1, "pause", 1))
			f.waitFor(90*time.Second, "n1 converged on v2", func() bool {
				if gs := f.state(); len(gs.Failures) > 0 {
					t.Fatalf("a failure charged to v2, which is good: %+v; n1 runs %+v", gs.Failures, f.workloads()["n1"].Status)
				}
				return f.converged(ns, v2)
			})
			gs := f.state()
			if len(gs.Failures) > 0 || !gs.Gate().Open {
				t.Fatalf("v2 converged with failures %+v, gate %+v", gs.Failures, gs.Gate())
			}
			for _, n := range gs.Nodes {
				if n.State != coordinator.StateConverged {
					t.Fatalf("%s is %s (%s)", n.Node, n.State, n.Error)
				}
			}
		})
	}
}

// inTheWay is a scriptedRuntime that cannot set its old workload aside
// for its first fails replacements.
type inTheWay struct {
	*scriptedRuntime
	mu    sync.Mutex
	fails int
}

func (r *inTheWay) Replace(ctx context.Context, spec *hashspec.Spec, sha string, step agent.StepFunc) error {
	r.mu.Lock()
	fail := r.fails > 0
	if fail {
		r.fails--
	}
	r.mu.Unlock()
	if !fail {
		return r.scriptedRuntime.Replace(ctx, spec, sha, step)
	}
	r.record("Replace")
	if err := step(ctx, "set old container aside"); err != nil {
		return err
	}
	return fmt.Errorf("%w: rename old container: sandbox not found", agent.ErrSetAside)
}

// A replacement that cannot set the old workload aside ran nothing of the
// release: it is not the release's failure (max_failures 1 would pause
// the group on it). The node keeps its slot, looks again, and converges.
func TestAnOldWorkloadInTheWayCountsNoFailure(t *testing.T) {
	g := groupkit.New(t, "intheway")
	st, group := g.Store, g.Name
	v1 := commitRecording(t, st, group, "v1", "")
	rt := &inTheWay{scriptedRuntime: newScripted(v1), fails: 2}
	startAgent(t, st, group, "n1", rt, agent.Allow{})
	waitNode(t, st, group, "n1", "converged on v1", func(n *coordinator.NodeState) bool {
		return n.SHA == v1 && n.State == coordinator.StateConverged
	})
	v2 := commitRecording(t, st, group, "v2", "")
	waitNode(t, st, group, "n1", "converged on v2", func(n *coordinator.NodeState) bool {
		return n.SHA == v2 && n.State == coordinator.StateConverged
	})
	noFailureCounted(t, st, group, "an old workload that could not be set aside")
	if n := rt.count("Replace"); n != 3 {
		t.Fatalf("Replace ran %d times, want 3 (two that could not set the old workload aside)", n)
	}
}

// judgedRuntime is a scriptedRuntime that judges its own health (an
// agent.HealthJudge, as Docker's runtime is), so that a test says when it
// is down and when it is only failing; and whose Replace fails, as a bad
// release's does.
type judgedRuntime struct {
	*scriptedRuntime
	hmu    sync.Mutex
	health agent.Health
}

func (r *judgedRuntime) setHealth(h agent.Health) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	r.health = h
}

func (r *judgedRuntime) Health(context.Context) (agent.Health, string) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	return r.health, fmt.Sprintf("scripted %d", r.health)
}

func (r *judgedRuntime) Healthy(ctx context.Context) (bool, string) {
	h, why := r.Health(ctx)
	return h == agent.HealthUp, why
}

func (r *judgedRuntime) Replace(ctx context.Context, _ *hashspec.Spec, _ string, step agent.StepFunc) error {
	r.record("Replace")
	if err := step(ctx, "start new container"); err != nil {
		return err
	}
	return errors.New("start container: exec format error")
}

// A node that keeps its slot while down behind a closed gate takes it back
// at each look (Reclaim), which writes its record as "replacing,
// recovering under its own slot" in the same transaction; the look then
// touches nothing and must say so again (paused), even when it said the
// same at the look before. It once did not, as its publisher took the
// record for unchanged, and the node stayed "replacing" while it stood
// still (nemesis seed 6, after a failure paused the managers).
func TestANodeKeepingItsSlotBehindAClosedGateSaysSo(t *testing.T) {
	g := groupkit.New(t, "keepsays")
	st, group := g.Store, g.Name
	v1 := commitRecording(t, st, group, "v1", "")
	rt := &judgedRuntime{scriptedRuntime: newScripted(v1)}
	p := startAgent(t, st, group, "n1", rt, agent.Allow{})
	waitNode(t, st, group, "n1", "converged on v1", func(n *coordinator.NodeState) bool {
		return n.SHA == v1 && n.State == coordinator.StateConverged
	})
	rt.setHealth(agent.HealthDown)
	waitNode(t, st, group, "n1", "down", func(n *coordinator.NodeState) bool { return n.State == coordinator.StateDown })
	commitRecording(t, st, group, "v2", "") // fails on n1, and pauses the group (max_failures 1)
	paused := func(n *coordinator.NodeState) bool { return n.State == coordinator.StatePaused }
	waitNode(t, st, group, "n1", "paused, keeping its slot", paused)
	reclaims := func() int { return strings.Count(p.logs.String(), "reclaimed the slot this node's claim holds") }
	before := reclaims()
	// Up from critical: the next look comes at once, and finds the node
	// still not healthy, so it keeps its slot.
	rt.setHealth(agent.HealthFailing)
	g.WaitFor(time.Minute, "a look that takes the slot back again", func() bool { return reclaims() > before })
	if !testkit.Poll(time.Minute, func() bool { return paused(nodeState(t, st, group, "n1")) }) {
		t.Fatalf("n1's record is %+v after the look, not paused", nodeState(t, st, group, "n1"))
	}
	if _, using := slotOf(t, st, group); len(using) != 1 || using[0] != "n1" {
		t.Fatalf("the slot is used by %v, want n1 keeping it", using)
	}
}
