package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A group whose slot was just released, with a node behind, shows the
// stagger: the gate's state, how long until the next grant, and that this
// is status's own estimate; in JSON too.
func TestStatusStagger(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	spec := "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  stagger = \"10m\"\n}\n"
	commitWebSpec(t, srv.HTTPAddr, "web.hcl", spec)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := coordinator.NewStore(c, "")
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutNode(ctx, "web", coordinator.NodeState{Node: "n1", Desired: gs.Desired.SHA, State: coordinator.StateWaiting, Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	putHolders(t, c, `{"holders":{},"released":1}`)
	code, out, errs := runCLI(t, srv.HTTPAddr, "status", "web")
	for _, want := range []string{"CLOSED (stagger): stagger: next grant after 10m from the last release (in 10m)", "an estimate from this status's first sight"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("status: code %d, stderr %s; want %q in:\n%s", code, errs, want, out)
		}
	}
	var doc struct {
		Gate gateDoc `json:"gate"`
	}
	readStatusJSON(t, srv.HTTPAddr, &doc)
	if doc.Gate.State != "stagger" || doc.Gate.OpensAt == nil {
		t.Fatalf("status -o json gate: %+v, want stagger with a time it opens", doc.Gate)
	}
}

// A one-shot status first sees the slot's release count when it starts, so
// its own sight of the release is no older than itself: the stagger must
// not hide a stall. A node that has waited for minutes, not in line, with
// the last release long before (its record is older than StallAfter plus
// the stagger), is reported stalled, as it would be without a stagger.
func TestStatusStaggerDoesNotHideStall(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	spec := "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  stagger = \"30s\"\n}\n"
	sha := commitWebSpec(t, srv.HTTPAddr, "web.hcl", spec)
	backdateCommit(t, c, 10*time.Minute)
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	putNode(t, st, coordinator.NodeState{Node: "a", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: time.Now().Add(-8 * time.Minute)})
	putNode(t, st, coordinator.NodeState{Node: "b", Desired: sha, State: coordinator.StateWaiting, Since: time.Now().Add(-5 * time.Minute)})
	// a released its slot 8 minutes ago: the count moved once.
	putHolders(t, c, `{"holders":{},"released":1}`)
	statusTable(t, srv.HTTPAddr, "STALLED: b waits (longest 5m", "  why b: not in line (no contender key")
	checkStall(t, statusDoc(t, srv.HTTPAddr), coordinator.CauseNotInLine, "b")
}
