package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// Review of acca91b: the agent policy allows the one transaction that
// marks another node's claim lost and records its failure, with the
// failure pause that failure=max_failures makes (touch desired, pause/,
// failures/, failcount/, its own events).
func TestAgentPolicyAllowsTheLostReport(t *testing.T) {
	srv, c, st := aclRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _, err := hashspec.Load([]byte(`{"name":"web","container":{"image":"example.com/app:x"},"update":{"failure_action":"pause","max_failures":1}}`), hashspec.FormatJSON, "spec")
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Commit(ctx, "web", s, "test", "x")
	if err != nil {
		t.Fatal(err)
	}
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	k := groupkit.Keys(t, "web")
	since := time.Now().UTC()
	rec := map[string]any{"holders": map[string]any{}, "claims": map[string]lockstep.Claim{
		"n2": {Session: "00000000-0000-4000-8000-000000000002", Since: since, Until: since.Add(time.Millisecond), Note: coordinator.ClaimNote(gs.Desired)}}}
	b, _ := json.Marshal(rec)
	if _, err := c.KV().Put(&api.KVPair{Key: lockstep.HoldersKey(k.Slot()), Value: b}, nil); err != nil {
		t.Fatal(err)
	}
	tc, err := api.NewClient(&api.Config{Address: srv.HTTPAddr, Token: tokenFor(t, c, "acl-policy.hcl", "web")})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := lockstep.NewSession(ctx, c, lockstep.SessionOptions{Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())
	m, err := lockstep.New(tc, sess, lockstep.Options{Prefix: k.Slot(), Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := lockstep.ReadHolders(c, k.Slot(), nil)
	if err != nil {
		t.Fatal(err)
	}
	judged, _ := hs.ClaimOf("n2")
	ast := coordinator.NewStore(tc, "")
	var action coordinator.Action
	marked, err := m.MarkLostWith(ctx, "n2", judged, func(ctx context.Context) (api.TxnOps, error) {
		ops, a, err := ast.LostOps(ctx, "web", "n1", "n2", judged.Note, judged.Since, "n2 lost")
		action = a
		return ops, err
	})
	if err != nil || !marked || action != coordinator.ActionPause {
		t.Fatalf("marked %v, action %v, err %v", marked, action, err)
	}
	gs, err = st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cl, _ := gs.Holders.ClaimOf("n2"); !cl.Lost || len(gs.Failures) != 1 || gs.Pause == nil || gs.Desired.SHA != r.SHA {
		t.Fatalf("claim %+v, failures %+v, pause %+v", cl, gs.Failures, gs.Pause)
	}
}
