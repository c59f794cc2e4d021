package agent_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleetwatch"
)

// dockerEvent is one Docker event of a managed container, as the outage
// tests read it: what happened to which node's container of which SHA.
type dockerEvent struct {
	at     time.Time
	action string // create, start, rename, kill, die, stop, destroy, health_status: healthy, ...
	node   string
	sha    string
	name   string // the container's name after the event, without the slash
}

func (e dockerEvent) String() string {
	return fmt.Sprintf("%s %s %s (%.12s) %s", e.at.Format("15:04:05.000"), e.node, e.action, e.sha, e.name)
}

func (e dockerEvent) aside() bool { return strings.HasSuffix(e.name, "-prev") }

// eventLog records the Docker events of a fleet's managed containers, so
// that a test can act the moment a step happens and check afterwards what
// happened while a fault lasted.
type eventLog struct {
	mu     sync.Mutex
	list   []dockerEvent
	notify chan struct{} // closed and replaced on every event
	err    error         // why the stream ended, if it did
}

// recordEvents subscribes to the fleet's engine until the test ends. Events
// of health probes (exec_*) are dropped: they come every 500ms per node.
func (f *fleet) recordEvents() *eventLog {
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	args := filters.NewArgs(filters.Arg("type", "container"), filters.Arg("label", agent.LabelGroup+"="+f.group))
	// Since replays what happened between this call and the stream being
	// set up; at second granularity it may replay a little more.
	since := fmt.Sprint(time.Now().Unix())
	msgs, errs := f.docker.Events(ctx, events.ListOptions{Filters: args, Since: since})
	l := &eventLog{notify: make(chan struct{})}
	go func() {
		for {
			select {
			case m := <-msgs:
				if !strings.HasPrefix(string(m.Action), "exec_") {
					a := m.Actor.Attributes
					l.add(dockerEvent{at: time.Unix(0, m.TimeNano), action: string(m.Action), node: a[agent.LabelNode],
						sha: a[agent.LabelSHA], name: a["name"]})
				}
			case err := <-errs:
				l.end(err)
				return
			}
		}
	}()
	return l
}

func (l *eventLog) add(e dockerEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, e)
	close(l.notify)
	l.notify = make(chan struct{})
}

func (l *eventLog) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
	close(l.notify)
	l.notify = make(chan struct{})
}

// len is the number of events so far: a mark for since and wait.
func (l *eventLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.list)
}

// since returns the events from mark on.
func (l *eventLog) since(mark int) []dockerEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]dockerEvent(nil), l.list[mark:]...)
}

// wait returns the first event from mark on that match accepts, waiting for
// it for at most d, and fails the test past that.
func (l *eventLog) wait(t *testing.T, d time.Duration, mark int, what string, match func(dockerEvent) bool) dockerEvent {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for i := mark; ; {
		l.mu.Lock()
		for ; i < len(l.list); i++ {
			if match(l.list[i]) {
				e := l.list[i]
				l.mu.Unlock()
				return e
			}
		}
		notify, err := l.notify, l.err
		l.mu.Unlock()
		if err != nil {
			t.Fatalf("docker event stream ended while waiting for %s: %v", what, err)
		}
		select {
		case <-notify:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
	}
}

// census watches, every 100ms until finished, each node's managed
// containers under either name and in any state. The runtime keeps the old
// container (set aside as <name>-prev) until the new one is healthy, so a
// node always has one or two: zero means its workload was lost, three is
// impossible by name. With stop-first, never two running at once. A node
// is down with no healthy running container under either name.
type census struct {
	mon       *fleetwatch.Monitor
	nodes     []string
	stopFirst bool
	bad       []string // the monitor's goroutine writes it, Finish waits for that
}

func (f *fleet) census(nodes []string, stopFirst bool) *census {
	c := &census{nodes: nodes, stopFirst: stopFirst}
	c.mon = f.watch(nodes, fleetwatch.Options{Down: fleetwatch.Unserved, Observe: c.observe, ProbeTimeout: 5 * time.Second})
	return c
}

func (c *census) observe(s *fleetwatch.Sample) {
	if s.ProbeErr != nil {
		return // the engine did not answer (a daemon restart, say): counted unanswered
	}
	for _, n := range c.nodes {
		w := s.Workloads[n]
		switch {
		case len(w.IDs) == 0 || len(w.IDs) > 2:
			c.note(fmt.Sprintf("node %s had %d containers: %v", n, len(w.IDs), w.Status))
		case len(w.Running) > 1 && c.stopFirst:
			c.note(fmt.Sprintf("node %s ran its old and new containers at once under stop-first: %v", n, w.Status))
		}
	}
}

func (c *census) note(s string) {
	if len(c.bad) < 10 {
		c.bad = append(c.bad, time.Now().Format("15:04:05.000 ")+s)
	}
}

// finish stops the census and fails the test on any violation, on fewer
// than 10 samples, or when more than maxDown nodes were down at once.
func (c *census) finish(t *testing.T, maxDown int) {
	t.Helper()
	ok := c.mon.Finish(t, fleetwatch.Bounds{Down: maxDown, Holding: fleetwatch.Unbounded, Busy: fleetwatch.Unbounded, MinSamples: 10})
	if len(c.bad) > 0 {
		t.Errorf("census: %d violations, the first:\n%s", len(c.bad), strings.Join(c.bad, "\n"))
		ok = false
	}
	if !ok {
		t.FailNow()
	}
}

// pauseAgent sends SIGSTOP or SIGCONT to node's agent, which stays the
// node's agent (signal forgets it).
func (f *fleet) pauseAgent(node string, sig syscall.Signal) {
	f.t.Helper()
	f.mu.Lock()
	cmd := f.procs[node]
	f.mu.Unlock()
	if cmd == nil {
		f.t.Fatalf("no agent running for %s", node)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		f.t.Fatalf("%v to the agent of %s: %v", sig, node, err)
	}
}

// checkKV reads the group once the fault is over and fails on what a fault
// must not leave behind: records that do not decode, a desired SHA other
// than sha, a history without every commit, a failure or a pause (a fault
// of a node is not the release's failure) or a slot still held.
func (f *fleet) checkKV(sha string, commits int) {
	f.t.Helper()
	f.waitFor(30*time.Second, "the slot to be free", func() bool {
		gs := f.state()
		return gs.Holders != nil && len(gs.Holders.Holding) == 0 && len(gs.Holders.Claims) == 0
	})
	gs := f.state()
	switch {
	case len(gs.Problems) > 0:
		f.t.Fatalf("records that do not decode: %v", gs.Problems)
	case gs.Desired == nil || gs.Desired.SHA != sha:
		f.t.Fatalf("desired is %+v, want %.12s", gs.Desired, sha)
	case len(gs.History) != commits:
		f.t.Fatalf("history has %d entries, want %d", len(gs.History), commits)
	case len(gs.Failures) > 0 || gs.Pause != nil || gs.Cancel != nil:
		f.t.Fatalf("the fault was recorded against the release: failures %+v, pause %+v, cancel %+v", gs.Failures, gs.Pause, gs.Cancel)
	}
	for _, n := range gs.Nodes {
		if n.State != coordinator.StateConverged || n.SHA != sha {
			f.t.Fatalf("node %s is %s on %.12s, want converged on %.12s", n.Node, n.State, n.SHA, sha)
		}
	}
}
