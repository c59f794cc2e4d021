package coordinator

import (
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
	nodes := []string{"a", "b", "c", "d", "e"}
	putConvergedRecords(t, c, st, "web", nodes...)
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
	markAutoRollback(t, c, st)
	if g = read(t, st, "web"); g.Desired.SHA != v3 || g.Promoted != nil {
		t.Fatalf("v3, never converged, marked as an automatic rollback: promoted %+v, want none", g.Promoted)
	}
}

// v1ConvergedThenV2 is five nodes that ran v1 (canarySpec) converged
// when v2 was committed, which recorded v1 converged (converged/); then
// mover, no canary of v1, went to v2.
func v1ConvergedThenV2(t *testing.T) (c *api.Client, st *Store, mover, v1 string) {
	t.Helper()
	c, st = devStore(t)
	nodes := []string{"a", "b", "c", "d", "e"}
	for _, n := range nodes {
		if err := st.PutNode(testCtx(t), "web", NodeState{Node: n, State: StateConverged, Since: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	v1 = commit(t, st, "web", canarySpec(t, "v1"))
	converge(t, st, "web", nodes...)
	commit(t, st, "web", canarySpec(t, "v2"))
	if _, ok := read(t, st, "web").convergedSHA[v1]; !ok {
		t.Fatal("v1 converged on every node, but the commit of v2 recorded no converged/")
	}
	mover = nodes[slices.IndexFunc(nodes, func(n string) bool { return !slices.Contains(ChooseCanaries(v1, nodes, 2), n) })]
	converge(t, st, "web", mover)
	return c, st, mover, v1
}

// markAutoRollback CAS-writes desired as it is with the automatic
// rollback's mark, as any agent's token may.
func markAutoRollback(t *testing.T, c *api.Client, st *Store) {
	t.Helper()
	k, _ := st.Keys("web")
	g := read(t, st, "web")
	d := *g.Desired
	d.AutoRollback = true
	if ok, _, err := c.KV().CAS(&api.KVPair{Key: k.Desired(), Value: mustJSON(d), ModifyIndex: g.DesiredPair.ModifyIndex}, nil); err != nil || !ok {
		t.Fatalf("mark desired: %v %v", ok, err)
	}
}

// A SHA that converged once and that the operator committed again, to go
// through its canaries again, keeps that canary stage: neither the mark
// an agent's token writes on desired, nor an honest automatic rollback to
// it after a later commit failed, promotes it; only a convergence recorded
// after that commit's canary record would. Nor does a SHA with a failure
// recorded since it converged pass for known-good.
func TestAutoRollbackKeepsCanaryStage(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T) (*Store, string) // returns the store and the node to read for
	}{
		{"mark on a SHA committed again", func(t *testing.T) (*Store, string) {
			c, st, mover, v1 := v1ConvergedThenV2(t)
			commit(t, st, "web", canarySpec(t, "v1")) // again, for its canaries
			markAutoRollback(t, c, st)
			if d := read(t, st, "web").Desired; d.SHA != v1 || !d.AutoRollback {
				t.Fatalf("desired %+v, want v1 marked", d)
			}
			return st, mover
		}},
		{"rollback to a SHA committed again", func(t *testing.T) (*Store, string) {
			_, st, back, v1 := v1ConvergedThenV2(t)
			commit(t, st, "web", canarySpec(t, "v1")) // back, on v2, keeps it from converging
			commit(t, st, "web", canarySpec(t, "v3"))
			failBack(t, st, back, v1)
			return st, back
		}},
		{"failure since it converged", func(t *testing.T) (*Store, string) {
			c, st, mover, v1 := v1ConvergedThenV2(t)
			k, _ := st.Keys("web")
			f := Failure{Node: "a", SHA: v1, Error: "unhealthy", At: time.Now().UTC()}
			if _, err := c.KV().Put(&api.KVPair{Key: k.Failure(v1, "a"), Value: mustJSON(f)}, nil); err != nil {
				t.Fatal(err)
			}
			g := read(t, st, "web")
			d := Desired{SHA: v1, Previous: g.Desired.SHA, CommittedAt: time.Now().UTC(), Author: "rollagent", AutoRollback: true}
			if ok, _, err := c.KV().CAS(&api.KVPair{Key: k.Desired(), Value: mustJSON(d), ModifyIndex: g.DesiredPair.ModifyIndex}, nil); err != nil || !ok {
				t.Fatalf("write desired: %v %v", ok, err)
			}
			return st, mover
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, node := tc.run(t)
			if g := read(t, st, "web"); g.Promoted != nil {
				t.Fatalf("read: promoted %+v, want none", g.Promoted)
			}
			g, err := st.ReadFor(testCtx(t), "web", node)
			if err != nil {
				t.Fatal(err)
			}
			if g.Promoted != nil {
				t.Fatalf("look of %s: promoted %+v, want none", node, g.Promoted)
			}
			if v := g.Gate(); v.Open || g.Canaries.Has(node) {
				t.Fatalf("%s: gate %s %q, canaries %+v: want it closed, waiting on the canaries", node, v.State, v.Reason, g.Canaries)
			}
		})
	}
}

// failBack has node fail on the desired SHA, which rolls the group back
// to sha by failure_action=rollback.
func failBack(t *testing.T, st *Store, node, sha string) {
	t.Helper()
	ctx := testCtx(t)
	failing := read(t, st, "web").Desired.SHA
	if err := st.PutNode(ctx, "web", NodeState{Node: node, SHA: failing, Desired: failing, State: StateFailed, Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if a, err := st.RecordFailure(ctx, "web", node, failing, "unhealthy"); err != nil || a != ActionRollback {
		t.Fatalf("failure of %s: %v, %v; want a rollback", ShortSHA(failing), a, err)
	}
	if d := read(t, st, "web").Desired; d.SHA != sha || !d.AutoRollback {
		t.Fatalf("desired %+v, want the automatic rollback to %s", d, ShortSHA(sha))
	}
}

// `rollagent promote` of a rollout the automatic rollback's mark promotes
// writes promoted/<sha> all the same: agents from before the mark wait on
// that record. Only the record makes it answer "promoted already".
func TestPromoteRecordsAutoRollback(t *testing.T) {
	ctx := testCtx(t)
	c, st, mover, v1 := v1ConvergedThenV2(t)
	failBack(t, st, mover, v1)
	if g := read(t, st, "web"); g.Promoted == nil || g.Promoted.By != AutoRollbackBy {
		t.Fatalf("promoted %+v, want by the automatic rollback", g.Promoted)
	}
	res, err := st.PromoteBy(ctx, "web", "for the older agents", "me")
	if err != nil || res.Already {
		t.Fatalf("promote: %+v, %v; want the record written", res, err)
	}
	k, _ := st.Keys("web")
	if p, _, err := c.KV().Get(k.Promoted(v1), nil); err != nil || p == nil {
		t.Fatalf("promoted/%s: %v, %v; want the record", ShortSHA(v1), p, err)
	}
	if g := read(t, st, "web"); g.Promoted == nil || g.Promoted.By != "me" {
		t.Fatalf("promoted %+v, want the record's, by me", g.Promoted)
	}
	if res, err := st.PromoteBy(ctx, "web", "again", "me"); err != nil || !res.Already {
		t.Fatalf("promote again: %+v, %v; want promoted already", res, err)
	}
}
