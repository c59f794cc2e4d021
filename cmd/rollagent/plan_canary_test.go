package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A plan of a spec with canaries names the canaries the commit would
// choose, and its gate is the one the commit would meet: open to them.
func TestPlanCanaries(t *testing.T) {
	srv := consultest.NewDev(t)
	planFleet(t, srv)
	code, out, errs := runPlan(t, srv, "web", "-f", "testdata/plan-canary.json", "-o", "json")
	if code != exitChanges || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var p planJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	want := "canaries " + coordinator.ChooseCanaries(p.SHA, []string{"n1", "n2", "n3"}, 1)[0] + " go first"
	found := false
	for _, n := range p.Notes {
		found = found || strings.HasPrefix(n, want)
	}
	if !found || !p.Gate.Open {
		t.Fatalf("notes %q, gate %+v: want a note %q and the gate open to the canaries", p.Notes, p.Gate, want)
	}
}
