package coordinator

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// An operator's pause holds the group, not the SHA it was set on: a new
// commit, a rollback, or a commit while the SHA is cancelled does not lift
// it behind the operator's back; the gate says who paused, since when, and
// that commits since did not lift it; only resume does.
func TestOperatorPauseHoldsTheGroupAcrossCommits(t *testing.T) {
	ctx := testCtx(t)
	st := NewStore(consultest.NewDev(t).Client(), "")
	r1, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	if _, already, err := st.PauseBy(ctx, "web", "freeze for the audit", "ops@desk"); err != nil || already {
		t.Fatalf("pause: already %v, %v", already, err)
	}
	if _, err := st.Cancel(ctx, "web", "", "bad", "me"); err != nil {
		t.Fatal(err)
	}
	r2, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 2), "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	if r2.Paused == nil || r2.Paused.By != "ops@desk" {
		t.Fatalf("the commit's result names no pause: %+v", r2.Paused)
	}
	for _, step := range []string{"a new commit", "a rollback"} {
		g, err := st.Read(ctx, "web", nil)
		if err != nil {
			t.Fatal(err)
		}
		v := g.Gate()
		if v.Open || v.State != GatePaused || !strings.Contains(v.Reason, "paused by ops@desk: freeze for the audit") ||
			!strings.Contains(v.Reason, "when "+ShortSHA(r1.SHA)+" was desired; commits since do not lift it") {
			t.Fatalf("after %s: gate %+v; want paused by ops@desk since %s", step, v, ShortSHA(r1.SHA))
		}
		if step == "a new commit" {
			if _, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 3), "me", "commit"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Rollback(ctx, "web", r2.SHA, "me"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := st.ResumeBy(ctx, "web", "ops@desk"); err != nil {
		t.Fatal(err)
	}
	g, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := g.Gate(); !v.Open || v.SHA != r2.SHA {
		t.Fatalf("after resume: gate %+v; want open for %s", v, ShortSHA(r2.SHA))
	}
}

// A pause of one SHA kept from before the pause held the group still
// closes the gate while that SHA is desired, and resume lifts it.
func TestLegacyOperatorPauseStillHolds(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
	r, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys("web")
	b, _ := json.Marshal(OperatorPause{SHA: r.SHA, Reason: "old", By: "ops"})
	if _, err := c.KV().Put(&api.KVPair{Key: k.LegacyOperatorPause(r.SHA), Value: b}, nil); err != nil {
		t.Fatal(err)
	}
	g, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := g.Gate(); v.State != GatePaused || !strings.Contains(v.Reason, "paused by ops: old") {
		t.Fatalf("gate under a pause of the SHA: %+v", v)
	}
	if _, err := st.Resume(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if g, err = st.Read(ctx, "web", nil); err != nil || !g.Gate().Open {
		t.Fatalf("after resume: %+v, %v", g.Gate(), err)
	}
}

// An agent from before the pause held the group looks for an operator's
// pause at brakes/pause/<desired SHA> alone: a pause keeps a copy there for
// the SHA desired, which every commit under the pause moves to the SHA it
// makes desired, and resume deletes, as a CANCEL keeps one at cancel/<sha>
// for agents from before brakes/. Otherwise such an agent, in a fleet that
// upgrades rollagent, takes slots while the group is paused.
func TestOperatorPauseCopiedForAgentsFromBefore(t *testing.T) {
	ctx := testCtx(t)
	c, st := devStore(t)
	k, _ := st.Keys("web")
	exists := func(key string) bool {
		t.Helper()
		p, _, err := c.KV().Get(key, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p != nil
	}
	r1, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 1), "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.PauseBy(ctx, "web", "freeze", "ops@desk"); err != nil {
		t.Fatal(err)
	}
	if !exists(k.LegacyOperatorPause(r1.SHA)) {
		t.Fatalf("after pause: no %s; an agent from before brakes/paused would be granted a slot", k.LegacyOperatorPause(r1.SHA))
	}
	r2, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 2), "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	if !exists(k.LegacyOperatorPause(r2.SHA)) || exists(k.LegacyOperatorPause(r1.SHA)) {
		t.Fatalf("after a commit under the pause: the copy must name %s alone", ShortSHA(r2.SHA))
	}
	if _, err := st.ResumeBy(ctx, "web", "ops@desk"); err != nil {
		t.Fatal(err)
	}
	if exists(k.LegacyOperatorPause(r2.SHA)) {
		t.Fatal("after resume: the copy is still there")
	}
	r3, err := st.Commit(ctx, "web", specWith(t, "pause", 1, 3), "me", "commit")
	if err != nil {
		t.Fatal(err)
	}
	if exists(k.LegacyOperatorPause(r3.SHA)) {
		t.Fatal("a commit with no pause wrote a copy")
	}
	g, err := st.Read(ctx, "web", nil)
	if err != nil || !g.Gate().Open {
		t.Fatalf("after resume and a commit: %+v, %v", g.Gate(), err)
	}
}
