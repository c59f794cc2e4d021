package agent_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/dockertest"
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

// census checks, every 100ms until finished, each node's managed containers
// under either name and in any state. The runtime keeps the old container
// (set aside as <name>-prev) until the new one is healthy, so a node always
// has one or two: zero means its workload was lost, three is impossible by
// name. With stop-first, never two running at once.
type census struct {
	nodes     []string
	stopFirst atomic.Bool
	mu        sync.Mutex
	samples   int
	errors    int    // samples the engine did not answer (a daemon restart, say)
	maxDown   int    // most nodes without a healthy running container at once
	worst     string // what they had then
	bad       []string
	stop      chan struct{}
	stopOnce  sync.Once
	done      chan struct{}
}

func (f *fleet) census(nodes []string, stopFirst bool) *census {
	c := &census{nodes: nodes, stop: make(chan struct{}), done: make(chan struct{})}
	c.stopFirst.Store(stopFirst)
	f.t.Cleanup(c.halt) // a test that fails early leaves no sampler behind
	go func() {
		defer close(c.done)
		for {
			c.observe(f)
			select {
			case <-c.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return c
}

func (c *census) observe(f *fleet) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	args := filters.NewArgs(filters.Arg("label", agent.LabelGroup+"="+f.group), filters.Arg("label", dockertest.Label+"="+dockertest.RunID()))
	list, err := f.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.errors++
		return
	}
	all, running, healthy := map[string]int{}, map[string]int{}, map[string]bool{}
	seen := map[string][]string{}
	for _, ct := range list {
		n := ct.Labels[agent.LabelNode]
		all[n]++
		seen[n] = append(seen[n], fmt.Sprintf("%s %s %q", strings.Join(ct.Names, ","), ct.State, ct.Status))
		if ct.State == "running" {
			running[n]++
			healthy[n] = healthy[n] || strings.Contains(ct.Status, "(healthy)")
		}
	}
	down, why := 0, []string{}
	for _, n := range c.nodes {
		if !healthy[n] {
			down++
			why = append(why, fmt.Sprintf("%s: %v", n, seen[n]))
		}
		switch {
		case all[n] == 0 || all[n] > 2:
			c.note(fmt.Sprintf("node %s had %d containers", n, all[n]))
		case running[n] > 1 && c.stopFirst.Load():
			c.note(fmt.Sprintf("node %s ran its old and new containers at once under stop-first", n))
		}
	}
	c.samples++
	if down > c.maxDown {
		c.maxDown, c.worst = down, time.Now().Format("15:04:05.000 ")+strings.Join(why, "; ")
	}
}

func (c *census) halt() {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
}

func (c *census) note(s string) {
	if len(c.bad) < 10 {
		c.bad = append(c.bad, time.Now().Format("15:04:05.000 ")+s)
	}
}

// finish stops the census and fails the test on any violation or when more
// than maxDown nodes were down at once.
func (c *census) finish(t *testing.T, maxDown int) {
	t.Helper()
	c.halt()
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("census: %d samples (%d unanswered), at most %d nodes down at once", c.samples, c.errors, c.maxDown)
	if c.samples < 10 {
		t.Fatalf("census: only %d samples", c.samples)
	}
	if len(c.bad) > 0 {
		t.Fatalf("census: %d violations, the first:\n%s", len(c.bad), strings.Join(c.bad, "\n"))
	}
	if c.maxDown > maxDown {
		t.Fatalf("census: %d nodes were down at once, want at most %d: %s", c.maxDown, maxDown, c.worst)
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
