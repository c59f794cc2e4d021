package main

import (
	"strings"
	"testing"

	"github.com/rollagent/rollagent/internal/consultest"
)

// A new commit while the group is paused says so, and status says the
// group is paused, by whom, and that the commit did not lift it; resume
// does.
func TestCommitUnderAPauseSaysTheGroupStaysPaused(t *testing.T) {
	srv := consultest.NewDev(t)
	if code, _, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web.json"); code != 0 {
		t.Fatal(errs)
	}
	code, out, errs := runCLI(t, srv.HTTPAddr, "pause", "web", "--reason", "audit")
	if code != 0 || !strings.Contains(out, "nothing moves, whatever is committed, until rollagent resume web") {
		t.Fatalf("pause: code %d out %q err %q", code, out, errs)
	}
	code, out, errs = runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web-v2.json")
	if code != 0 || !strings.Contains(out, "the group is paused by ") || !strings.Contains(out, ": audit; nothing moves until `rollagent resume web`") {
		t.Fatalf("commit under a pause: code %d out %q err %q; want it to say the group stays paused", code, out, errs)
	}
	code, out, errs = runCLI(t, srv.HTTPAddr, "status", "web")
	if code != 0 || !strings.Contains(out, "paused by ") || !strings.Contains(out, "commits since do not lift it") {
		t.Fatalf("status under a pause carried over a commit: code %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs = runCLI(t, srv.HTTPAddr, "resume", "web"); code != 0 {
		t.Fatal(errs)
	}
	if code, out, _ = runCLI(t, srv.HTTPAddr, "status", "web"); code != 0 || strings.Contains(out, "paused by") {
		t.Fatalf("status after resume:\n%s", out)
	}
}
