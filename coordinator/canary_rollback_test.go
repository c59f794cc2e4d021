package coordinator

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
)

// canarySpec is a release of group web with canaries that auto-promote
// after a long healthy time, under failure_action=rollback.
func canarySpec(t *testing.T, tag string) *hashspec.Spec {
	t.Helper()
	js := `{"name":"web","container":{"image":"demo:` + tag + `"},"update":{"failure_action":"rollback","max_failures":1,` +
		`"canary":2,"auto_promote":true,"canary_healthy_time":"10m"}}`
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "fixture")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An automatic rollback (failure_action=rollback) to a SHA with canaries
// is promoted: it goes back to a SHA that converged on every node, so a
// node that is no canary of that SHA's earlier commit goes back at once
// instead of waiting canary_healthy_time on those canaries. A desired
// record that claims to be an automatic rollback to a SHA that never
// converged (what a stolen agent token could write) promotes nothing.
func TestAutoRollbackIsPromoted(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
	k, _ := st.Keys("web")
	nodes := []string{"a", "b", "c", "d", "e"}
	for _, n := range nodes {
		b, _ := json.Marshal(NodeState{Node: n, State: StateConverged, Since: time.Now().UTC()})
		if _, err := c.KV().Put(&api.KVPair{Key: k.Node(n), Value: b}, nil); err != nil {
			t.Fatal(err)
		}
	}
	v1 := commit(t, st, "web", canarySpec(t, "v1"))
	converge(t, st, "web", nodes...)
	v2 := commit(t, st, "web", canarySpec(t, "v2")) // finds v1 converged
	// A node that is no canary of v1 runs v2 (a canary of v2, or
	// replaced by hand) and fails: it is to go back.
	i := slices.IndexFunc(nodes, func(n string) bool { return !slices.Contains(ChooseCanaries(v1, nodes, 2), n) })
	back := nodes[i]
	if err := st.PutNode(ctx, "web", NodeState{Node: back, SHA: v2, Desired: v2, State: StateFailed, Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if a, err := st.RecordFailure(ctx, "web", back, v2, "unhealthy"); err != nil || a != ActionRollback {
		t.Fatalf("failure of v2: %v, %v; want a rollback", a, err)
	}
	g, err := st.ReadFor(ctx, "web", back)
	if err != nil {
		t.Fatal(err)
	}
	if g.Desired.SHA != v1 || !g.Desired.AutoRollback || g.Promoted == nil || g.Promoted.By != AutoRollbackBy {
		t.Fatalf("desired %+v, promoted %+v: want v1 by the automatic rollback, promoted", g.Desired, g.Promoted)
	}
	if v := g.Gate(); !v.Open {
		t.Fatalf("%s, no canary of v1, after the automatic rollback: gate %s %q, want open", back, v.State, v.Reason)
	}
	// The mark alone, on a SHA that never converged, promotes nothing.
	v3 := commit(t, st, "web", canarySpec(t, "v3"))
	g = read(t, st, "web")
	d := *g.Desired
	d.AutoRollback = true
	if ok, _, err := c.KV().CAS(&api.KVPair{Key: k.Desired(), Value: mustJSON(d), ModifyIndex: g.DesiredPair.ModifyIndex}, nil); err != nil || !ok {
		t.Fatalf("mark desired: %v %v", ok, err)
	}
	if g = read(t, st, "web"); g.Desired.SHA != v3 || g.Promoted != nil {
		t.Fatalf("v3, never converged, marked as an automatic rollback: promoted %+v, want none", g.Promoted)
	}
}
