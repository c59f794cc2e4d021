package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
)

// fixture builds the KV pairs of a group from records, the way Consul would
// list them.
type fixture struct {
	spec   *hashspec.Spec
	cancel bool
	// cancelAs replaces the cancel record's reason ("operator") and sets
	// who cancelled, when cancel is set.
	cancelAs *Cancel
	pause    bool
	// opPause is an operator's pause; legacyCancel a CANCEL where it was
	// kept before brakes/.
	opPause, legacyCancel bool
	failures              int
	nodes                 map[string]NodeStatus // node -> state, on the desired SHA when "converged"
	garbage               map[string]string     // extra raw keys
}

func specWith(t *testing.T, action string, maxFailures, parallel int) *hashspec.Spec {
	t.Helper()
	js := `{"name":"web","container":{"image":"demo:v1"},"update":{"failure_action":"` + action +
		`","max_failures":` + itoa(maxFailures) + `,"max_parallel":` + itoa(parallel) + `}}`
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "fixture")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func (f fixture) state(t *testing.T) *GroupState {
	t.Helper()
	k, _ := NewKeys("", "web")
	sha, _ := f.spec.SHA()
	canon, _ := f.spec.Canonical()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	put := func(key string, v any) *api.KVPair {
		b, _ := json.Marshal(v)
		return &api.KVPair{Key: key, Value: b, ModifyIndex: 7}
	}
	pairs := api.KVPairs{
		put(k.Desired(), Desired{SHA: sha, CommittedAt: at}),
		put(k.History(sha), HistoryEntry{SHA: sha, Spec: canon, CommittedAt: at}),
	}
	if f.cancel {
		c := Cancel{SHA: sha, Reason: "operator"}
		if f.cancelAs != nil {
			c.Reason, c.By = f.cancelAs.Reason, f.cancelAs.By
		}
		pairs = append(pairs, put(k.Cancel(sha), c))
	}
	if f.pause {
		pairs = append(pairs, put(k.Pause(sha), Pause{SHA: sha, Failures: f.failures, Reason: "max_failures"}))
	}
	if f.opPause {
		pairs = append(pairs, put(k.OperatorPause(), OperatorPause{SHA: sha, Reason: "look first", By: "ops@host"}))
	}
	if f.legacyCancel {
		pairs = append(pairs, put(k.LegacyCancel(sha), Cancel{SHA: sha, Reason: "old"}))
	}
	for i := 0; i < f.failures; i++ {
		n := "n" + itoa(i)
		pairs = append(pairs, put(k.Failure(sha, n), Failure{Node: n, SHA: sha, Error: "unhealthy"}))
	}
	for n, st := range f.nodes {
		ns := NodeState{Node: n, State: st, Since: at}
		if st == StateConverged {
			ns.SHA = sha
		}
		pairs = append(pairs, put(k.Node(n), ns))
	}
	for key, v := range f.garbage {
		pairs = append(pairs, &api.KVPair{Key: k.Root() + key, Value: []byte(v)})
	}
	return Parse(k, "web", pairs, 9)
}

func TestGate(t *testing.T) {
	tests := []struct {
		name     string
		f        fixture
		open     bool
		reason   string
		limit    int
		problems int
	}{
		{"open with K from policy", fixture{spec: specWith(t, "pause", 1, 3)}, true, "open", 3, 0},
		{"cancelled", fixture{spec: specWith(t, "pause", 1, 1), cancel: true}, false, "cancelled: operator", 0, 0},
		// `rollagent cancel` without --reason: a valid record, not an unreadable one.
		{"cancelled without a reason", fixture{spec: specWith(t, "pause", 1, 1), cancel: true, cancelAs: &Cancel{By: "ops@host"}},
			false, "cancelled by ops@host", 0, 0},
		{"cancelled with a reason", fixture{spec: specWith(t, "pause", 1, 1), cancel: true, cancelAs: &Cancel{By: "ops@host", Reason: "bad image"}},
			false, "cancelled by ops@host: bad image", 0, 0},
		{"operator's pause", fixture{spec: specWith(t, "pause", 1, 1), opPause: true}, false, "paused by ops@host: look first", 0, 0},
		{"cancel from before brakes/", fixture{spec: specWith(t, "pause", 1, 1), legacyCancel: true}, false, "cancelled: old", 0, 0},
		{"paused record", fixture{spec: specWith(t, "pause", 2, 1), pause: true, failures: 2}, false, "paused after 2", 0, 0},
		{"pause by count before the record lands", fixture{spec: specWith(t, "pause", 2, 1), failures: 2}, false, "reached max_failures=2", 0, 0},
		{"below max_failures", fixture{spec: specWith(t, "pause", 2, 1), failures: 1}, true, "open", 1, 0},
		{"continue ignores failures", fixture{spec: specWith(t, "continue", 1, 1), failures: 5}, true, "open", 1, 0},
		{"garbage cancel still closes", fixture{spec: specWith(t, "pause", 1, 1), garbage: map[string]string{}, cancel: true}, false, "cancelled", 0, 0},
		{"garbage node record is a problem, not a crash", fixture{spec: specWith(t, "pause", 1, 1),
			garbage: map[string]string{"nodes/x": "{not json"}}, true, "open", 1, 1},
		{"history that does not hash to its SHA", fixture{spec: specWith(t, "pause", 1, 1),
			garbage: map[string]string{"history/" + strings.Repeat("a", 64): `{"sha":"` + strings.Repeat("a", 64) + `","spec":{"container":{"image":"x:1"}}}`}}, true, "open", 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.f.state(t)
			v := g.Gate()
			if v.Open != tc.open || !strings.Contains(v.Reason, tc.reason) || v.Limit != tc.limit {
				t.Fatalf("gate = %+v, want open=%v reason~%q limit=%d", v, tc.open, tc.reason, tc.limit)
			}
			if len(g.Problems) != tc.problems {
				t.Fatalf("problems = %q, want %d", g.Problems, tc.problems)
			}
		})
	}
}

func TestGateWithoutCommitOrSpec(t *testing.T) {
	k, _ := NewKeys("", "web")
	if v := Parse(k, "web", nil, 1).Gate(); v.Open || v.Reason != "nothing committed" {
		t.Fatalf("empty group: %+v", v)
	}
	sha := strings.Repeat("b", 64)
	d, _ := json.Marshal(Desired{SHA: sha})
	g := Parse(k, "web", api.KVPairs{{Key: k.Desired(), Value: d}}, 1)
	if v := g.Gate(); v.Open || !strings.Contains(v.Reason, "missing from history") {
		t.Fatalf("desired without history: %+v", v)
	}
	g = Parse(k, "web", api.KVPairs{{Key: k.Desired(), Value: []byte("garbage")}}, 1)
	if v := g.Gate(); v.Open || len(g.Problems) != 1 {
		t.Fatalf("garbage desired: %+v, problems %q", v, g.Problems)
	}
}

func TestOnFailure(t *testing.T) {
	tests := []struct {
		action   string
		max, n   int
		expected Action
	}{
		{"pause", 1, 1, ActionPause},
		{"pause", 2, 1, ActionNone},
		{"rollback", 1, 1, ActionRollback},
		{"rollback", 3, 2, ActionNone},
		{"continue", 1, 9, ActionNone},
	}
	for _, tc := range tests {
		t.Run(tc.action+"/"+itoa(tc.max)+"/"+itoa(tc.n), func(t *testing.T) {
			if got := OnFailure(specWith(t, tc.action, tc.max, 1), tc.n, 4); got != tc.expected {
				t.Fatalf("OnFailure = %v, want %v", got, tc.expected)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	f := fixture{spec: specWith(t, "pause", 1, 1), nodes: map[string]NodeStatus{
		"a": StateConverged, "b": StateConverged, "c": StateReplacing, "d": StateWaiting, "e": StateFailed}}
	p := f.state(t).Progress()
	want := Progress{Total: 5, Converged: 2, Replacing: 1, Waiting: 1, Failed: 1}
	if p != want {
		t.Fatalf("progress = %+v, want %+v", p, want)
	}
	f.nodes = map[string]NodeStatus{"a": StateConverged}
	if !f.state(t).Progress().Done {
		t.Fatal("all converged must be done")
	}
}

// A CANCEL written without --reason is a valid record: the gate names who
// cancelled, and nothing calls the record unreadable.
func TestCancelWithoutReason(t *testing.T) {
	g := fixture{spec: specWith(t, "pause", 1, 1), cancel: true, cancelAs: &Cancel{By: "ops@host"}}.state(t)
	if v := g.Gate(); v.Open || v.Reason != "cancelled by ops@host" {
		t.Fatalf("gate = %+v, want closed with reason %q", v, "cancelled by ops@host")
	}
	if g.Cancel.Reason != "" || len(g.Problems) != 0 {
		t.Fatalf("cancel = %+v, problems %q: want the record as written", g.Cancel, g.Problems)
	}
}

// The lockstep gate has Consul check, in the transaction, only the closing
// key agents write (the failure pause): a check that a key does not exist
// is a write of it to Consul's ACLs, and agents may not write brakes/.
// The brakes are named for the error, and checked through desired.
func TestLockGateChecksBrakesThroughDesired(t *testing.T) {
	g := fixture{spec: specWith(t, "pause", 1, 1)}.state(t)
	k, _ := NewKeys("", "web")
	sha := g.Desired.SHA
	lg := g.LockGate(k)
	if strings.Join(lg.Closed, ",") != k.Pause(sha) || lg.DesiredIndex != g.DesiredPair.ModifyIndex {
		t.Fatalf("checked in the transaction: %v at %d", lg.Closed, lg.DesiredIndex)
	}
	for _, b := range []string{k.Cancel(sha), k.OperatorPause(), k.LegacyOperatorPause(sha), k.LegacyCancel(sha)} {
		if !strings.HasPrefix(b, k.BrakesPrefix()) && b != k.LegacyCancel(sha) {
			t.Errorf("brake %s outside %s", b, k.BrakesPrefix())
		}
		if !strings.Contains(strings.Join(lg.Brakes, ","), b) {
			t.Errorf("brakes %v lack %s", lg.Brakes, b)
		}
	}
}

// A failure under an operator's pause is recorded and does nothing else:
// the operator has taken over, as under a CANCEL.
func TestFailureUnderOperatorPauseActsOnNothing(t *testing.T) {
	g := fixture{spec: specWith(t, "pause", 1, 1), opPause: true}.state(t)
	k, _ := NewKeys("", "web")
	if a, ops, ev := g.failureAction(k, g.Desired.SHA, 1); a != ActionNone || ops != nil || ev != nil {
		t.Fatalf("failure action under an operator's pause: %v, %v, %v", a, ops, ev)
	}
}
