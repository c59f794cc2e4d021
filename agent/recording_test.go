package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit"
)

// recordingRuntime is a Runtime whose workload is a SHA in memory and which
// records every call, so that a test can say exactly what the agent did to
// its node: nothing destructive means no Replace, Restore or Finish.
type recordingRuntime struct {
	mu    sync.Mutex
	sha   string
	calls []string
	sick  string // when set, WaitHealthy fails with it
	// unfetchable is how many Prepare calls fail, as with an image that a
	// registry cannot serve for a while.
	unfetchable int
}

// destructive are the calls that change a node's workload.
var destructive = []string{"Replace", "Restore", "Finish"}

func (r *recordingRuntime) record(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
}

// Calls returns the calls so far and forgets them.
func (r *recordingRuntime) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func (r *recordingRuntime) count(call string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c == call {
			n++
		}
	}
	return n
}

func (r *recordingRuntime) SHA() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sha
}

func (r *recordingRuntime) Inspect(context.Context) (agent.Observed, error) {
	r.record("Inspect")
	return agent.Observed{SHA: r.SHA()}, nil
}

func (r *recordingRuntime) Prepare(context.Context, *hashspec.Spec, string) error {
	r.record("Prepare")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unfetchable > 0 {
		r.unfetchable--
		return errors.New("image is not present and the pull failed: registry unreachable")
	}
	return nil
}

func (r *recordingRuntime) Replace(ctx context.Context, _ *hashspec.Spec, sha string, step agent.StepFunc) error {
	r.record("Replace")
	if err := step(ctx, "swap"); err != nil {
		return err
	}
	r.mu.Lock()
	r.sha = sha
	r.mu.Unlock()
	return nil
}

func (r *recordingRuntime) WaitHealthy(context.Context, *hashspec.Spec) error {
	r.record("WaitHealthy")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sick != "" {
		return errors.New(r.sick)
	}
	return nil
}

func (r *recordingRuntime) Finish(context.Context) error { r.record("Finish"); return nil }

// Restore removes the workload if it runs sha; nothing is ever set aside.
func (r *recordingRuntime) Restore(_ context.Context, sha string) error {
	r.record("Restore")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sha == sha {
		r.sha = ""
	}
	return nil
}
func (r *recordingRuntime) Healthy(context.Context) (bool, string) {
	return true, "" // not recorded: the service check calls it on a timer
}

// inProcAgent is an agent.Agent running in this process on a runtime the
// test controls.
type inProcAgent struct {
	logs   *testkit.Buffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// startAgent runs an agent for node of group until stop or the test's end.
func startAgent(t *testing.T, st *coordinator.Store, group, node string, rt agent.Runtime, allow agent.Allow) *inProcAgent {
	t.Helper()
	return startAgentWith(t, agent.Config{Group: group, Node: node, Store: st, Runtime: rt, Allow: allow, Resync: time.Hour})
}

// startAgentWith runs an agent with cfg, logging to a buffer the test can
// read, until stop or the test's end.
func startAgentWith(t *testing.T, cfg agent.Config) *inProcAgent {
	t.Helper()
	logs := &testkit.Buffer{}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Debug, Output: logs})
	node := cfg.Node
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcAgent{logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("agent %s log:\n%s", node, logs.String())
		}
	})
	return p
}

// stop ends the agent and waits for Run to return; it may be called twice.
func (p *inProcAgent) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	p.once.Do(func() {
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("agent Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop within 30s of its context ending")
		}
	})
}

// recordingSpec is a fast spec for the recording runtime; release makes
// distinct SHAs.
func recordingSpec(t *testing.T, group, release string, extra string) *hashspec.Spec {
	t.Helper()
	js := fmt.Sprintf(`{"name":%q,"container":{"image":"example.com/app:%s"%s},"update":{"min_healthy_time":"1s"}}`,
		group, release, extra)
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "recording spec")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// commitRecording commits recordingSpec(release, extra) as group's desired
// spec and returns its SHA.
func commitRecording(t *testing.T, st *coordinator.Store, group, release, extra string) string {
	t.Helper()
	return commitSpec(t, st, group, release, recordingSpec(t, group, release, extra))
}

// commitSpec commits s as group's desired spec, release its name in the
// records, and returns its SHA.
func commitSpec(t testing.TB, st *coordinator.Store, group, release string, s *hashspec.Spec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := st.Commit(ctx, group, s, "test", "commit "+release)
	if err != nil {
		t.Fatal(err)
	}
	return r.SHA
}

// readGroup reads group once, failing the test if Consul does not answer
// within 10s.
func readGroup(t testing.TB, st *coordinator.Store, group string) *coordinator.GroupState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := st.Read(ctx, group, nil)
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// nodeState returns node's published record, or nil.
func nodeState(t testing.TB, st *coordinator.Store, group, node string) *coordinator.NodeState {
	t.Helper()
	gs := readGroup(t, st, group)
	for i := range gs.Nodes {
		if gs.Nodes[i].Node == node {
			return &gs.Nodes[i]
		}
	}
	return nil
}

// waitNode waits for node's record to satisfy cond.
func waitNode(t *testing.T, st *coordinator.Store, group, node, what string, cond func(n *coordinator.NodeState) bool) {
	t.Helper()
	testkit.Eventually(t, time.Minute, node+" to be "+what, func() bool {
		n := nodeState(t, st, group, node)
		return n != nil && cond(n)
	})
}

// noFailureCounted fails the test unless group's rollout has no failure
// recorded and its gate is open: what did happen (why) must not count
// against the rollout.
func noFailureCounted(t *testing.T, st *coordinator.Store, group, why string) {
	t.Helper()
	gs := readGroup(t, st, group)
	if len(gs.Failures) != 0 || !gs.Gate().Open {
		t.Fatalf("%s must not count as a failure of the rollout: failures %v, gate %+v", why, gs.Failures, gs.Gate())
	}
}

func noDestructiveCalls(t *testing.T, calls []string) {
	t.Helper()
	for _, c := range calls {
		if slices.Contains(destructive, c) {
			t.Fatalf("the agent called %s; calls: %s", c, strings.Join(calls, " "))
		}
	}
}
