package agent_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/watch"
	"github.com/rollagent/rollagent/lockstep"
)

// killRounds is how often each step is hit per update order.
const killRounds = 2

// killStep is a point in a replacement at which the holder's agent is
// SIGKILLed, as seen from outside: a Docker event of the managed containers,
// or for the first one the slot record.
type killStep struct {
	name string
	on   func(e dockerEvent, sha string) bool // nil: a new slot holder
}

var (
	// The grant is the first step's fence and writes its record, so this is
	// as early as a holder can die.
	afterGrant    = killStep{name: "right after its grant"}
	afterStop     = killStep{"after stopping the old container", func(e dockerEvent, _ string) bool { return e.action == "stop" && e.aside() }}
	afterAside    = killStep{"after setting the old container aside", func(e dockerEvent, _ string) bool { return e.action == "rename" && e.aside() }}
	afterStart    = killStep{"after starting the new container", func(e dockerEvent, sha string) bool { return e.action == "start" && e.sha == sha && !e.aside() }}
	beforeRelease = killStep{"before releasing its slot", func(e dockerEvent, _ string) bool { return e.action == "destroy" && e.aside() }}
)

// The holder's agent is SIGKILLed at each step of a replacement, each step
// killRounds times, under both update orders, and restarted at once, as
// systemd would. Agents keep no state of their own: the restarted agent
// finds the old container set aside and finishes or restores, so that no
// node is ever left with no container or three, stop-first never runs two,
// start-first never leaves a node without a healthy one, nothing is
// recorded against the release, and the rollout completes.
func TestOutageAgentKilledAtEachStep(t *testing.T) {
	f := newFleet(t, "kill")
	ns := nodes(3)
	procs := map[string]*proc{}
	for _, n := range ns {
		procs[n] = f.startDocker(n)
	}
	v1 := f.commit(f.spec(f.image("v1", nil), 3, "pause", 1))
	f.waitFor(90*time.Second, "first deploy of v1", func() bool { return f.converged(ns, v1) })
	ev := f.recordEvents()
	k := &killer{f: f, ev: ev, procs: procs, held: map[string]bool{}}
	commits := 1
	for _, order := range []string{hashspec.OrderStopFirst, hashspec.OrderStartFirst} {
		stopFirst := order == hashspec.OrderStopFirst
		cen := f.census(ns, stopFirst)
		spec := f.spec(f.image("v2", nil), 1, "pause", 1)
		spec.Update.Order = order
		spec.Container.Env = map[string]string{"ROLLOUT": order} // a new SHA per order
		sha := f.commit(spec)
		commits++
		start := time.Now()
		steps := []killStep{afterGrant, afterStop, afterStart, beforeRelease}
		if !stopFirst {
			steps[1] = afterAside // start-first stops the old one only once the new one is healthy
		}
		for range killRounds {
			for _, st := range steps {
				k.killAt(st, sha)
			}
		}
		f.waitFor(2*time.Minute, order+" rollout after the kills", func() bool { return f.converged(ns, sha) })
		t.Logf("%s: %d kills, rollout completed in %s", order, killRounds*len(steps), time.Since(start).Round(100*time.Millisecond))
		// A killed agent's node keeps its slot until its agent is back, so
		// at K = 1 at most one node is ever down, the victim included;
		// start-first keeps the old container serving throughout.
		cen.finish(t, map[bool]int{true: 1, false: 0}[stopFirst])
		f.checkKV(sha, commits)
	}
}

// killer SIGKILLs agents at steps and restarts them.
type killer struct {
	f     *fleet
	ev    *eventLog
	procs map[string]*proc
	mark  int             // events before it belong to earlier kills
	index uint64          // of the slot record, for blocking reads
	held  map[string]bool // sessions seen holding the slot
}

// killAt waits for the next holder to reach st, SIGKILLs its agent right
// there, waits for it to be gone and starts it again.
func (k *killer) killAt(st killStep, sha string) {
	t := k.f.t
	t.Helper()
	node := ""
	if st.on == nil {
		node = k.nextHolder()
	} else {
		node = k.ev.wait(t, 60*time.Second, k.mark, "a holder "+st.name, func(e dockerEvent) bool { return st.on(e, sha) }).node
	}
	k.f.signal(node, syscall.SIGKILL)
	select {
	case <-k.procs[node].done:
	case <-time.After(10 * time.Second):
		t.Fatalf("agent %s still running 10s after SIGKILL", node)
	}
	k.mark = k.ev.len()
	t.Logf("killed %s %s", node, st.name)
	k.procs[node] = k.f.startDocker(node)
}

// nextHolder waits for a session that has not held the slot before to take
// it, and returns its node.
func (k *killer) nextHolder() string {
	t := k.f.t
	t.Helper()
	c := k.f.srv.Client()
	prefix := k.f.keys().Slot()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var node string
	opts := watch.Options{From: k.index, Backoff: retry.NewSteady(10*time.Millisecond, 10*time.Millisecond)}
	found := watch.Run(ctx, opts, func(ctx context.Context, index uint64) (uint64, bool, error) {
		pairs, meta, err := c.KV().List(prefix, (&api.QueryOptions{WaitIndex: index, WaitTime: 10 * time.Second}).WithContext(ctx))
		if err != nil {
			return 0, false, err // tried again 10ms later, until ctx ends
		}
		k.index = meta.LastIndex
		h := lockstep.ParseHolders(prefix, pairs)
		if h.Problem != "" {
			t.Fatalf("slot record: %v", h.Problem)
		}
		for id, e := range h.Holding {
			if !k.held[id] {
				k.held[id] = true
				node = e.Name
				return meta.LastIndex, true, nil
			}
		}
		return meta.LastIndex, false, nil
	})
	if !found {
		t.Fatal("no new slot holder within 60s")
	}
	return node
}

// A Docker call that a killed agent made can land after its restarted
// successor looked at the node: here the old container is set aside behind
// the successor's back while it waits for the slot (which the test holds).
// Replace then finds the leftover. That is no fault of the release: the
// agent undoes it, records no failure, and goes on.
func TestOutageLateCallOfAKilledAgent(t *testing.T) {
	f, ns, v1 := deployed(t, "late", 1)
	release := f.takeSlot()
	v2 := f.commit(f.spec(f.image("v2", nil), 1, "pause", 1))
	f.waitFor(30*time.Second, "n1 to wait for the slot", func() bool {
		gs := f.state()
		return len(gs.Nodes) == 1 && gs.Nodes[0].State == coordinator.StateWaiting && gs.Nodes[0].Desired == v2
	})
	w := f.workloads()["n1"]
	if len(w.IDs) != 1 || w.SHAs[0] != v1 {
		t.Fatalf("n1 runs %+v, want one container of v1", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.docker.ContainerRename(ctx, w.IDs[0], "rollagent-"+f.group+"-n1-prev"); err != nil {
		t.Fatal(err)
	}
	release()
	f.waitFor(time.Minute, "rollout to v2", func() bool { return f.converged(ns, v2) })
	f.checkKV(v2, 2)
}

// takeSlot holds the group's only slot, under the gate of what is desired
// now, until the returned func is called.
func (f *fleet) takeSlot() func() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := f.srv.Client()
	k := f.keys()
	s, err := lockstep.NewSession(ctx, c, lockstep.SessionOptions{Name: "test-blocker"})
	if err != nil {
		f.t.Fatal(err)
	}
	m, err := lockstep.New(c, s, lockstep.Options{Prefix: k.Slot(), Name: "test-blocker"})
	if err != nil {
		f.t.Fatal(err)
	}
	hold, err := m.Acquire(ctx, f.state().LockGate(k))
	if err != nil {
		f.t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := hold.Release(ctx); err != nil {
				f.t.Errorf("releasing the test's slot: %v", err)
			}
			if err := s.Close(ctx); err != nil {
				f.t.Errorf("closing the test's session: %v", err)
			}
		})
	}
	f.t.Cleanup(release)
	return release
}
