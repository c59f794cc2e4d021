package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// leaseRuntime is a recordingRuntime whose bounds are short, so that a
// node's lease (agent.WithLeaseGrace, healthy_deadline 2s) is seconds,
// whose replacement takes two steps, each behind its own fence, as
// Docker's does, and whose verification of slow blocks until released.
type leaseRuntime struct {
	*recordingRuntime
	slow      string
	release   chan struct{}
	verifying chan struct{} // a value each time a verification of slow begins
}

func newLeaseRuntime(sha, slow string) *leaseRuntime {
	return &leaseRuntime{recordingRuntime: &recordingRuntime{sha: sha}, slow: slow,
		release: make(chan struct{}), verifying: make(chan struct{}, 1)}
}

func (r *leaseRuntime) StepTimeout() time.Duration    { return time.Second }
func (r *leaseRuntime) PrepareTimeout() time.Duration { return time.Second }

// Replace records each destructive step after its fence passed.
func (r *leaseRuntime) Replace(ctx context.Context, _ *hashspec.Spec, sha string, step agent.StepFunc) error {
	r.record("Replace")
	for _, name := range []string{"set old aside", "start new"} {
		if err := step(ctx, name); err != nil {
			return err
		}
		r.record(name)
	}
	r.mu.Lock()
	r.sha = sha
	r.mu.Unlock()
	return nil
}

// WaitHealthy verifies slow for as long as the test says: a long
// verification, which only its context cuts short.
func (r *leaseRuntime) WaitHealthy(ctx context.Context, _ *hashspec.Spec) error {
	r.record("WaitHealthy")
	if r.SHA() != r.slow {
		return nil
	}
	select {
	case r.verifying <- struct{}{}:
	default:
	}
	select {
	case <-r.release:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("verification cut off: %w", context.Cause(ctx))
	}
}

// leaseSpec is release's spec with a healthy_deadline of 2s, and two
// failures before the group pauses.
func leaseSpec(t *testing.T, group, release string) *hashspec.Spec {
	t.Helper()
	js := fmt.Sprintf(`{"name":%q,"container":{"image":"example.com/app:%s"},"update":{"min_healthy_time":"1s",
		"healthy_deadline":"2s","failure_action":"pause","max_failures":2}}`, group, release)
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "lease spec")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func commitLease(t *testing.T, st *coordinator.Store, group, release string) string {
	t.Helper()
	return commitSpec(t, st, group, release, leaseSpec(t, group, release))
}

func startLeaseAgent(t *testing.T, st *coordinator.Store, group, node string, rt agent.Runtime) *inProcAgent {
	t.Helper()
	return startAgentWith(t, agent.WithLeaseGrace(agent.Config{Group: group, Node: node, Store: st, Runtime: rt, Resync: time.Hour}, time.Second))
}

// readHolders reads the group's slot from Consul, nil when it cannot.
func readHolders(g *groupkit.Group) *lockstep.Holders {
	h, _ := g.Holders()
	return h
}

// slotWatch samples the slot while a test runs and keeps what breaks the
// guarantee: more nodes counted than K = 1, or n1's claim reported lost.
type slotWatch struct {
	mu     sync.Mutex
	broken []string
	stop   chan struct{}
	done   chan struct{}
}

func watchSlot(g *groupkit.Group) *slotWatch {
	w := &slotWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			if h := readHolders(g); h != nil {
				counted := h.Counted()
				c, claimed := h.ClaimOf("n1")
				switch {
				case len(counted) > 1:
					w.add(fmt.Sprintf("%v counted at once at K = 1 (holding %v)", counted, h.Holding))
				case claimed && c.Lost:
					w.add("n1's claim reported lost while n1 lived")
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *slotWatch) add(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.broken) < 5 {
		w.broken = append(w.broken, s)
	}
}

// check fails the test with what broke so far, if anything.
func (w *slotWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.broken) > 0 {
		t.Fatalf("from Consul's slot record: %v", w.broken)
	}
}

func (w *slotWatch) end(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.check(t)
}

// A holder that is alive never loses its slot. n1 verifies v2 for longer
// than its lease from the grant, and its session ends meanwhile (a
// liveness blip: Consul invalidates it). n1 sees its hold go, stops
// verifying, and at its next look makes a new session and reclaims its
// claim, which renews it; then it verifies again and converges. n2, at the
// head of the line all along, must never report n1 lost nor take its
// slot. On 6d7f554 the claim's lease was fixed at the grant: n2 recorded
// n1 "lost while replacing" the moment its session ended, and was granted
// beside it.
func TestLiveHolderKeepsItsSlotWhenItsSessionEnds(t *testing.T) {
	g := groupkit.New(t, "liveholder")
	srv, st, group := g.Srv, g.Store, g.Name
	v1 := commitLease(t, st, group, "v1")
	v2, _ := leaseSpec(t, group, "v2").SHA()
	rt1 := newLeaseRuntime("", v2)
	startLeaseAgent(t, st, group, "n1", rt1)
	waitNode(t, st, group, "n1", "converged on v1", converged(v1))
	commitLease(t, st, group, "v2")
	select {
	case <-rt1.verifying:
	case <-time.After(time.Minute):
		t.Fatal("n1 never began to verify v2")
	}
	startLeaseAgent(t, st, group, "n2", newLeaseRuntime(v1, ""))
	g.WaitFor(time.Minute, "n2 in line", func() bool {
		h := readHolders(g)
		return h != nil && len(h.Waiting) == 1
	})
	claim, ok := readHolders(g).ClaimOf("n1")
	if !ok {
		t.Fatal("n1 holds no claim")
	}
	time.Sleep(time.Until(claim.Until) + 100*time.Millisecond) // the lease from the grant is over
	w := watchSlot(g)
	if _, err := srv.Client().Session().Destroy(claim.Session, nil); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	g.WaitFor(time.Minute, "n1 to reclaim its slot with a new session", func() bool {
		w.check(t)
		s, ok := groupkit.Holding(readHolders(g), "n1")
		return ok && s != claim.Session
	})
	t.Logf("n1 reclaimed its slot %s after its session ended; its lease is %s", time.Since(ended).Round(10*time.Millisecond), claim.Until.Sub(claim.Since))
	close(rt1.release)
	for _, n := range []string{"n1", "n2"} {
		waitNode(t, st, group, n, "converged on v2", converged(v2))
	}
	w.end(t)
	noFailureCounted(t, st, group, "a live holder's lost session")
}

// A holder paused between a passed fence and its destructive call (a
// SIGSTOP, a frozen VM) for longer than its session and its lease loses
// its slot: its session ends, and the node in line, having seen it gone
// for the lease, reports it lost and is granted. Here n1's fence before
// its step is applied by Consul and its reply held back (the pause) until
// n2 holds the slot. n1 must then not take its step: the fence came back
// too late to vouch for it, and the fence it runs again fails. On 6d7f554
// n1 took its step beside n2.
func TestPausedHolderDoesNotStepAfterItsSlotPassed(t *testing.T) {
	g := groupkit.New(t, "pausedholder")
	srv, st, group := g.Srv, g.Store, g.Name
	v1 := commitLease(t, st, group, "v1")
	cl, faults := srv.FaultyClient()
	rt1 := newLeaseRuntime("", "")
	startLeaseAgent(t, coordinator.NewStore(cl, ""), group, "n1", rt1)
	waitNode(t, st, group, "n1", "converged on v1", converged(v1))
	rt1.Calls()

	fenced, resume, paused := pauseAfterFence(g, faults, rt1)
	v2 := commitLease(t, st, group, "v2")
	select {
	case <-fenced:
	case <-time.After(time.Minute):
		t.Fatal("n1 never fenced a step of v2")
	}
	rt2 := newLeaseRuntime(v1, v2) // holds its slot, verifying, while n1 resumes
	startLeaseAgent(t, st, group, "n2", rt2)
	g.WaitFor(time.Minute, "n2 in line", func() bool {
		h := readHolders(g)
		return h != nil && len(h.Waiting) == 1
	})
	close(resume)
	select {
	case err := <-paused:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("n1's pause never ended")
	}
	g.WaitFor(time.Minute, "n1's slot free", func() bool { return slotFree(t, g, "n1") })
	calls := rt1.Calls()
	for _, c := range []string{"set old aside", "start new", "Restore", "Finish"} {
		if slices.Contains(calls, c) {
			t.Fatalf("n1 took a step after its pause, with n2 holding its slot: calls %v", calls)
		}
	}
	if got := rt1.SHA(); got != v1 {
		t.Fatalf("n1 runs %.12s, want %.12s untouched", got, v1)
	}
	if !hasFailure(st, group, "n1", v2) {
		t.Fatal("n1, paused past its lease, was not recorded lost")
	}
	close(rt2.release)
	waitNode(t, st, group, "n2", "converged on v2", converged(v2))
}

// pauseAfterFence arms faults to pause n1, whose runtime is rt, after its
// next fence: Consul applies the fence and its reply is held back. fenced
// closes then; once the test closes resume, the pause goes on as a
// stopped process's would: its session ends, and paused gets nil once n2
// holds the slot in its place (or why not).
func pauseAfterFence(g *groupkit.Group, faults *consultest.Faults, rt *leaseRuntime) (fenced, resume chan struct{}, paused chan error) {
	fenced, resume, paused = make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var session string
	faults.OnTxn(func(ops api.TxnOps) bool {
		// A fence checks the gate and its holder key's session, and
		// locks nothing, as a grant does.
		if !consultest.TxnHas(ops, api.KVCheckIndex, g.Keys.Desired()) || consultest.TxnHas(ops, api.KVLock, "") {
			return false
		}
		for _, op := range ops {
			if op.KV != nil && op.KV.Verb == api.KVCheckSession {
				session = op.KV.Session
				return true
			}
		}
		return false
	}, func() error {
		close(fenced)
		select {
		case <-resume: // n2 is in line
		case <-time.After(2 * time.Minute):
		}
		// The paused process passes no check: Consul ends its session.
		if _, err := g.Client.Session().Destroy(session, nil); err != nil {
			paused <- err
			return nil
		}
		if !testkit.Poll(2*time.Minute, func() bool { _, ok := groupkit.Holding(readHolders(g), "n2"); return ok }) {
			paused <- errors.New("n2 was not granted n1's slot within 2m")
			return nil
		}
		rt.Calls() // what n1 did before its pause
		paused <- nil
		return nil
	})
	return fenced, resume, paused
}
