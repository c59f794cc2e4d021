package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// status shows the progress deadline: the deadline and the last progress
// while it runs, and once it passed under failure_action=pause, the gate
// closed as deadline_passed, who saw it pass and why, in text and JSON.
func TestStatusProgressDeadline(t *testing.T) {
	srv := consultest.NewDev(t)
	spec := "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  failure_action = \"pause\"\n  progress_deadline = \"10m\"\n}\n"
	commitWebSpec(t, srv.HTTPAddr, "web.hcl", spec)
	st := coordinator.NewStore(srv.Client(), "")
	ctx := testkit.Context(t, time.Minute)
	if err := st.PutNode(ctx, "web", coordinator.NodeState{Node: "n1", State: coordinator.StateWaiting, Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	_, out, _ := runCLI(t, srv.HTTPAddr, "status", "web")
	if !strings.Contains(out, "progress deadline 10m0s: last progress ") {
		t.Fatalf("status while it runs: want the deadline and the last progress in:\n%s", out)
	}
	gs, err := st.Read(ctx, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if fired, _, err := st.FireDeadline(ctx, "web", "n1", gs.Desired.SHA, gs.Desired.CommittedAt); err != nil || !fired {
		t.Fatalf("fire: %v, %v", fired, err)
	}
	_, out, _ = runCLI(t, srv.HTTPAddr, "status", "web")
	for _, want := range []string{
		"CLOSED (deadline_passed): deadline passed: no node converged in 10m0s (update.progress_deadline)",
		"progress deadline passed ",
		"(seen by n1): no node converged in 10m0s (update.progress_deadline); failure_action=pause",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status: want %q in:\n%s", want, out)
		}
	}
	var doc struct {
		Gate     gateDoc `json:"gate"`
		Deadline *struct {
			After  string     `json:"after"`
			Passed bool       `json:"passed"`
			At     *time.Time `json:"at"`
			Node   string     `json:"node"`
			Action string     `json:"action"`
		} `json:"progress_deadline"`
	}
	readStatusJSON(t, srv.HTTPAddr, &doc)
	if d := doc.Deadline; doc.Gate.State != "deadline_passed" || d == nil || d.After != "10m0s" || !d.Passed || d.At == nil || d.Node != "n1" || d.Action != "pause" {
		t.Fatalf("status -o json: gate %q, progress_deadline %+v", doc.Gate.State, d)
	}
	if code, _, errs := runCLI(t, srv.HTTPAddr, "resume", "web"); code != 0 {
		t.Fatalf("resume: %s", errs)
	}
	_, out, _ = runCLI(t, srv.HTTPAddr, "status", "web")
	if !strings.Contains(out, "OPEN") && !strings.Contains(out, "open") {
		t.Errorf("after resume, want the gate open:\n%s", out)
	}
}
