package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
)

// release is a spec of group web whose image tag makes its SHA.
func release(t *testing.T, tag, action string, maxFailures int) *hashspec.Spec {
	t.Helper()
	js := fmt.Sprintf(`{"name":"web","container":{"image":"demo:%s"},"update":{"failure_action":%q,"max_failures":%d,"max_parallel":4}}`,
		tag, action, maxFailures)
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "fixture")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func commit(t *testing.T, st *Store, group string, spec *hashspec.Spec) string {
	t.Helper()
	r, err := st.Commit(testCtx(t), group, spec, "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	return r.SHA
}

// converge publishes ns converged on group's desired SHA, as their agents
// do once it runs healthy on their nodes.
func converge(t *testing.T, st *Store, group string, ns ...string) {
	t.Helper()
	sha := read(t, st, group).Desired.SHA
	for _, n := range ns {
		if err := st.PutNode(testCtx(t), group, NodeState{Node: n, SHA: sha, Desired: sha, State: StateConverged, Since: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
}

func read(t *testing.T, st *Store, group string) *GroupState {
	t.Helper()
	g, err := st.Read(testCtx(t), group, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// failCount is sha's failure counter as stored, or nil.
func failCount(t *testing.T, st *Store, group, sha string) *FailCount {
	t.Helper()
	k, _ := st.Keys(group)
	p, _, err := st.Get(testCtx(t), k.FailCount(sha), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		return nil
	}
	var c FailCount
	if err := decode(p.Key, p.Value, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// Failures recorded at the same instant by several holders (K >= 2) are
// counted one after another: of N of them, exactly one pauses or rolls
// back, and the count stored is N. Before the counter, each counted from
// the same read, saw 1 of max_failures=2, and none paused.
func TestConcurrentFailuresActExactlyOnce(t *testing.T) {
	const holders, trials = 4, 20
	st := NewStore(consultest.NewDev(t).Client(), "")
	tests := []struct {
		action      string
		maxFailures int
		want        Action
	}{
		{"pause", 2, ActionPause},
		{"pause", 3, ActionPause},
		{"rollback", 2, ActionRollback},
		{"rollback", 4, ActionRollback},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.action, tc.maxFailures), func(t *testing.T) {
			for trial := range trials {
				group := fmt.Sprintf("%s-%d-%d", tc.action, tc.maxFailures, trial)
				good := commit(t, st, group, release(t, "v1", "pause", 1))
				converge(t, st, group, "n9")
				bad := commit(t, st, group, release(t, "bad", tc.action, tc.maxFailures))
				actions := recordAtOnce(t, st, group, bad, holders)
				if n := count(actions, tc.want); n != 1 {
					t.Fatalf("trial %d: %d of %d failures returned %v, want exactly 1 (actions %v)", trial, n, holders, tc.want, actions)
				}
				g := read(t, st, group)
				if got := len(g.failuresOf(g.keys(t), bad, g.note)); got != holders {
					t.Fatalf("trial %d: %d failure records, want %d", trial, got, holders)
				}
				if c := failCount(t, st, group, bad); c == nil || c.Failures != holders || c.Writes != holders {
					t.Fatalf("trial %d: counter %+v, want %d failures in %d writes", trial, c, holders, holders)
				}
				switch tc.want {
				case ActionPause:
					if g.Pause == nil || g.Pause.Failures != tc.maxFailures || g.Desired.SHA != bad {
						t.Fatalf("trial %d: pause %+v desired %s, want a pause at %d failures", trial, g.Pause, ShortSHA(g.Desired.SHA), tc.maxFailures)
					}
				case ActionRollback:
					if paused, err := st.exists(testCtx(t), g.keys(t).Pause(bad)); err != nil || paused ||
						g.Desired.SHA != good || g.Desired.Previous != bad {
						t.Fatalf("trial %d: desired %+v, want a rollback to %s and no pause", trial, g.Desired, ShortSHA(good))
					}
				}
			}
		})
	}
}

// recordAtOnce records the failure of n nodes to reach sha, all released
// at the same instant, and returns what each call did.
func recordAtOnce(t *testing.T, st *Store, group, sha string, n int) []Action {
	t.Helper()
	ctx := testCtx(t)
	actions := make([]Action, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			actions[i], errs[i] = st.RecordFailure(ctx, group, fmt.Sprintf("n%d", i), sha, "unhealthy")
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return actions
}

func count(actions []Action, a Action) int {
	n := 0
	for _, got := range actions {
		if got == a {
			n++
		}
	}
	return n
}

func (g *GroupState) keys(t *testing.T) Keys {
	t.Helper()
	k, err := NewKeys("", g.Group)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A node's failure counts once, however often it is recorded (an agent
// retrying a write whose answer it lost), though every write moves the
// counter.
func TestRepeatedFailureCountsOnce(t *testing.T) {
	st := NewStore(consultest.NewDev(t).Client(), "")
	bad := commit(t, st, "web", release(t, "bad", "pause", 2))
	for i := range 3 {
		if a, err := st.RecordFailure(testCtx(t), "web", "n1", bad, "unhealthy"); err != nil || a != ActionNone {
			t.Fatalf("write %d: %v, %v; want no action: one node is one failure of max_failures=2", i, a, err)
		}
	}
	if c := failCount(t, st, "web", bad); c == nil || c.Failures != 1 || c.Writes != 3 {
		t.Fatalf("counter %+v, want 1 failure in 3 writes", c)
	}
}

// A failure is recorded only against desired as it was read: a read older
// than desired (a Consul server answering from behind its log, just after
// a restart) would otherwise see another SHA desired and record the
// failure that reaches max_failures with no action.
func TestFailureTxnChecksDesiredAsRead(t *testing.T) {
	st := NewStore(consultest.NewDev(t).Client(), "")
	commit(t, st, "web", release(t, "w", "pause", 1))
	stale := read(t, st, "web")
	x := commit(t, st, "web", release(t, "x", "pause", 1))
	ops, action := stale.failureTxn(stale.keys(t), Failure{Node: "n1", SHA: x, Error: "unhealthy"}, AgentBy("n1"))
	if _, conflict, err := st.txn(testCtx(t), ops); !conflict || action != ActionNone {
		t.Fatalf("failure written on a read from before desired moved: action %v, err %v; want a conflict", action, err)
	}
	if a, err := st.RecordFailure(testCtx(t), "web", "n1", x, "unhealthy"); err != nil || a != ActionPause {
		t.Fatalf("RecordFailure = %v, %v; want the pause at max_failures=1", a, err)
	}
}

// A failure recorded after a CANCEL counts, but acts no more: the operator
// took over, and neither a pause nor a rollback may change what they see.
func TestFailureAfterCancelDoesNothingElse(t *testing.T) {
	st := NewStore(consultest.NewDev(t).Client(), "")
	for _, action := range []string{"pause", "rollback"} {
		t.Run(action, func(t *testing.T) {
			commit(t, st, action, release(t, "v1", "pause", 1))
			bad := commit(t, st, action, release(t, "bad", action, 1))
			if _, err := st.Cancel(testCtx(t), action, bad, "bad image", "me"); err != nil {
				t.Fatal(err)
			}
			before := read(t, st, action)
			a, err := st.RecordFailure(testCtx(t), action, "n1", bad, "unhealthy")
			if err != nil || a != ActionNone {
				t.Fatalf("RecordFailure after cancel = %v, %v; want no action", a, err)
			}
			g := read(t, st, action)
			if len(g.Failures) != 1 || g.Pause != nil || g.Desired.SHA != bad ||
				g.DesiredPair.ModifyIndex != before.DesiredPair.ModifyIndex {
				t.Fatalf("after cancel: failures %d pause %+v desired %s (index %d, was %d); want the failure recorded and nothing else",
					len(g.Failures), g.Pause, ShortSHA(g.Desired.SHA), g.DesiredPair.ModifyIndex, before.DesiredPair.ModifyIndex)
			}
		})
	}
}

// failure_action=rollback goes back only to a SHA that converged on every
// node (a commit found it so: converged/), the most recent such, never
// cancelled, paused or failed since. With none, it pauses and says why.
// Issue 25 item 8: on 6d7f554 it went to the SHA desired before whatever
// became of it, such as a tag typo whose pull failed on every node, which
// ran nowhere and counts no failure.
func TestAutomaticRollbackTarget(t *testing.T) {
	c := consultest.NewDev(t).Client()
	st := NewStore(c, "")
	type step func(t *testing.T, group string) // builds the history before the bad commit
	commitTag := func(tag string) step {
		return func(t *testing.T, group string) { commit(t, st, group, release(t, tag, "continue", 1)) }
	}
	converged := func(t *testing.T, group string) { converge(t, st, group, "n1", "n2") }
	// A typo in the tag: the pull fails on every node, which says so and
	// stays on what it runs.
	typo := func(t *testing.T, group string) {
		g := read(t, st, group)
		for _, n := range g.Nodes {
			n.Desired, n.State, n.Error = g.Desired.SHA, StateFailed, "prepare: pull access denied"
			if err := st.PutNode(testCtx(t), group, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel := func(t *testing.T, group string) {
		if _, err := st.Cancel(testCtx(t), group, "", "", "me"); err != nil {
			t.Fatal(err)
		}
	}
	fail := func(t *testing.T, group string) {
		if _, err := st.RecordFailure(testCtx(t), group, "n9", read(t, st, group).Desired.SHA, "unhealthy"); err != nil {
			t.Fatal(err)
		}
	}
	// n1 fails, and n2's agent, whose clock is 10 minutes behind the
	// committer's, records it lost (RecordFailureBy): the failure's time
	// is before the converged record's, though it came after it.
	failBehind := func(t *testing.T, group string) {
		sha := read(t, st, group).Desired.SHA
		if err := st.PutNode(testCtx(t), group, NodeState{Node: "n1", SHA: sha, Desired: sha, State: StateFailed, Since: time.Now()}); err != nil {
			t.Fatal(err)
		}
		st.now = func() time.Time { return time.Now().Add(-10 * time.Minute) }
		defer func() { st.now = nil }()
		if _, err := st.RecordFailureBy(testCtx(t), group, "n2", "n1", sha, "n1 lost while replacing"); err != nil {
			t.Fatal(err)
		}
	}
	pauseByHand := func(t *testing.T, group string) {
		k, _ := st.Keys(group)
		sha := read(t, st, group).Desired.SHA
		b, _ := json.Marshal(Pause{SHA: sha, Reason: "by hand"})
		if _, err := c.KV().Put(&api.KVPair{Key: k.Pause(sha), Value: b}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rollbackTo := func(tag string) step {
		return func(t *testing.T, group string) {
			sha, _ := release(t, tag, "continue", 1).SHA()
			if _, err := st.Rollback(testCtx(t), group, sha, "me"); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name  string
		steps []step
		want  string // the tag rolled back to; "" for a pause
	}{
		{"the previous SHA, converged", []step{commitTag("a"), converged, commitTag("b"), converged}, "b"},
		{"past a previous that never converged", []step{commitTag("a"), converged, commitTag("b")}, "a"},
		{"past a tag typo whose pull failed everywhere", []step{commitTag("a"), converged, commitTag("typo"), typo}, "a"},
		{"past a cancelled previous", []step{commitTag("a"), converged, commitTag("b"), cancel}, "a"},
		{"past a failed previous", []step{commitTag("a"), converged, commitTag("b"), fail}, "a"},
		{"past a paused previous", []step{commitTag("a"), converged, commitTag("b"), pauseByHand}, "a"},
		{"an older SHA rolled back to and converged again", []step{commitTag("a"), converged, commitTag("b"), converged,
			rollbackTo("a"), converged}, "a"},
		{"the latest converged, not the previous", []step{commitTag("a"), converged, commitTag("b"), converged, rollbackTo("a")}, "b"},
		{"past one that converged, then failed when committed again", []step{commitTag("a"), converged, commitTag("b"), converged,
			rollbackTo("a"), fail, commitTag("c")}, "b"},
		{"past the latest converged, failed since on a host whose clock is behind", []step{commitTag("b"), converged, commitTag("a"), converged,
			commitTag("c"), rollbackTo("a"), failBehind, commitTag("d")}, "b"},
		{"none: first commit", nil, ""},
		{"none: nothing ever converged", []step{commitTag("a"), commitTag("b")}, ""},
		{"none: only a cancelled one", []step{commitTag("a"), cancel}, ""},
		{"none: only failed ones", []step{commitTag("a"), fail, commitTag("b"), fail}, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			group := fmt.Sprintf("g%d", i)
			for _, s := range tc.steps {
				s(t, group)
			}
			bad := commit(t, st, group, release(t, "bad", "rollback", 1))
			a, err := st.RecordFailure(testCtx(t), group, "n1", bad, "unhealthy")
			if err != nil {
				t.Fatal(err)
			}
			g := read(t, st, group)
			if tc.want == "" {
				if a != ActionPause || g.Desired.SHA != bad || g.Pause == nil || !strings.Contains(g.Pause.Reason, "paused instead") ||
					!strings.Contains(g.Gate().Reason, "failure_action=rollback paused instead") {
					t.Fatalf("action %v desired %s pause %+v gate %q; want a pause that says rollback found nowhere to go", a, ShortSHA(g.Desired.SHA), g.Pause, g.Gate().Reason)
				}
				return
			}
			want, _ := release(t, tc.want, "continue", 1).SHA()
			if a != ActionRollback || g.Desired.SHA != want || g.Desired.Previous != bad || g.Pause != nil {
				t.Fatalf("action %v desired %+v pause %+v; want a rollback to %s", a, g.Desired, g.Pause, tc.want)
			}
		})
	}
}

// A SHA committed again starts a new rollout: the pause, failures and
// counter of its earlier one are gone in the commit's transaction, so it
// neither starts paused nor counts old failures; a CANCEL stays.
func TestRecommitStartsClean(t *testing.T) {
	st := NewStore(consultest.NewDev(t).Client(), "")
	tests := []struct {
		name        string
		maxFailures int
		again       func(t *testing.T, group, sha string) // makes sha desired again
	}{
		{"commit after a pause", 1, func(t *testing.T, group, _ string) { commit(t, st, group, release(t, "x", "pause", 1)) }},
		{"commit below max_failures", 2, func(t *testing.T, group, _ string) { commit(t, st, group, release(t, "x", "pause", 2)) }},
		{"rollback to it", 2, func(t *testing.T, group, sha string) {
			if _, err := st.Rollback(testCtx(t), group, sha, "me"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			group := fmt.Sprintf("g%d", i)
			x := commit(t, st, group, release(t, "x", "pause", tc.maxFailures))
			if _, err := st.RecordFailure(testCtx(t), group, "n1", x, "unhealthy"); err != nil {
				t.Fatal(err)
			}
			commit(t, st, group, release(t, "y", "pause", 1))
			tc.again(t, group, x)
			g := read(t, st, group)
			if g.Desired.SHA != x || g.Pause != nil || len(g.Failures) != 0 || !g.Gate().Open || failCount(t, st, group, x) != nil {
				t.Fatalf("x again: desired %s pause %+v failures %v gate %+v counter %+v; want a clean start",
					ShortSHA(g.Desired.SHA), g.Pause, g.Failures, g.Gate(), failCount(t, st, group, x))
			}
			a, err := st.RecordFailure(testCtx(t), group, "n2", x, "unhealthy")
			want := OnFailure(g.Spec, 1, g.NodeCount())
			if err != nil || a != want {
				t.Fatalf("first failure of the new rollout: %v, %v; want %v", a, err, want)
			}
			if c := failCount(t, st, group, x); c == nil || c.Failures != 1 {
				t.Fatalf("counter %+v, want it to start again from 1", c)
			}
		})
	}
	t.Run("a cancel stays", func(t *testing.T) {
		x := commit(t, st, "c", release(t, "x", "pause", 1))
		if _, err := st.Cancel(testCtx(t), "c", x, "", "me"); err != nil {
			t.Fatal(err)
		}
		commit(t, st, "c", release(t, "y", "pause", 1))
		if _, err := st.Commit(testCtx(t), "c", release(t, "x", "pause", 1), "me", "commit"); err == nil || !strings.Contains(err.Error(), "cancelled") {
			t.Fatalf("commit of a cancelled SHA: %v, want a refusal", err)
		}
	})
}

// Resume clears the counter with the failures it counted: the next failure
// is the first again.
func TestResumeClearsTheCounter(t *testing.T) {
	st := NewStore(consultest.NewDev(t).Client(), "")
	x := commit(t, st, "web", release(t, "x", "pause", 1))
	if a, err := st.RecordFailure(testCtx(t), "web", "n1", x, "unhealthy"); err != nil || a != ActionPause {
		t.Fatalf("first failure: %v, %v; want a pause", a, err)
	}
	if _, err := st.Resume(testCtx(t), "web"); err != nil {
		t.Fatal(err)
	}
	if c := failCount(t, st, "web", x); c != nil {
		t.Fatalf("counter %+v after resume, want none", c)
	}
	if a, err := st.RecordFailure(testCtx(t), "web", "n2", x, "unhealthy"); err != nil || a != ActionPause {
		t.Fatalf("first failure after resume: %v, %v; want a pause again", a, err)
	}
}

func TestIsTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"unreachable", &UnreachableError{Addr: "http://127.0.0.1:8500", Err: errors.New("connection refused")}, true},
		{"unreachable, wrapped", fmt.Errorf("read: %w", &UnreachableError{Err: &url.Error{Op: "Get", Err: context.DeadlineExceeded}}), true},
		{"no leader", fmt.Errorf("consul: %w", api.StatusError{Code: 500, Body: "No cluster leader"}), true},
		{"rate limited", fmt.Errorf("consul: %w", api.StatusError{Code: 429}), true},
		{"lost every race", ErrConflict, true},
		{"denied", fmt.Errorf("consul: %w", api.StatusError{Code: 403, Body: "Permission denied"}), false},
		{"bad request", fmt.Errorf("consul: %w", api.StatusError{Code: 400}), false},
		{"a bad record", errors.New("desired: not a valid record"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsTransient(tc.err); got != tc.want {
				t.Fatalf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// An operator who pauses a rollout that goes wrong does not reset its
// failure budget by resuming it: a node that finishes its step under the
// pause and fails is recorded, and its failure_action applies at once as a
// failure pause (under rollback too: the agent may not carry the
// operator's pause to the SHA it would roll back to, RollbackUnderPause);
// the resume that lifts the operator's pause lifts nothing else. On f035df7 the
// resume deleted the failures, and the failing SHA rolled on with a fresh
// budget.
func TestResumeOfOperatorPauseKeepsFailures(t *testing.T) {
	st := NewStore(consultest.NewDev(t).Client(), "")
	for _, action := range []string{"pause", "rollback"} {
		t.Run(action, func(t *testing.T) {
			v1 := commit(t, st, action, release(t, "v1", "pause", 1))
			converge(t, st, action, "n9")
			bad := commit(t, st, action, release(t, "bad", action, 1))
			if _, _, err := st.PauseBy(testCtx(t), action, "looks bad", "ops"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.RecordFailure(testCtx(t), action, "n1", bad, "unhealthy"); err != nil {
				t.Fatal(err)
			}
			if g := read(t, st, action); g.Gate().State != GatePaused {
				t.Fatalf("under the operator's pause: gate %+v", g.Gate())
			}
			if _, err := st.ResumeBy(testCtx(t), action, "ops"); err != nil {
				t.Fatal(err)
			}
			g := read(t, st, action)
			if g.Desired.SHA != bad {
				t.Fatalf("desired %s after a failure under an operator's pause, want %s (no rollback under it; v1 is %s)",
					ShortSHA(g.Desired.SHA), ShortSHA(bad), ShortSHA(v1))
			}
			if action == "rollback" && (g.Pause == nil || !strings.Contains(g.Pause.Reason, RollbackUnderPause)) {
				t.Fatalf("failure pause %+v, want one that says the rollback was not taken under the operator's pause", g.Pause)
			}
			if g.OperatorPause != nil || len(g.Failures) != 1 || g.Pause == nil {
				t.Fatalf("after the operator's resume: operator pause %+v, %d failures, failure pause %+v; want only the operator's lifted",
					g.OperatorPause, len(g.Failures), g.Pause)
			}
			if v := g.Gate(); v.Open || v.State != GatePaused {
				t.Fatalf("after the operator's resume: gate %+v; want it closed by the failure that reached max_failures", v)
			}
			// A second resume lifts what the failures hold, as before.
			if _, err := st.ResumeBy(testCtx(t), action, "ops"); err != nil {
				t.Fatal(err)
			}
			if g := read(t, st, action); len(g.Failures) != 0 || !g.Gate().Open {
				t.Fatalf("after the second resume: %d failures, gate %+v", len(g.Failures), g.Gate())
			}
		})
	}
}
