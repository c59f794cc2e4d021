package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// A paused group's table names what failed, where and when, not only that
// it paused: every node's error says "paused" by then.
func TestStatusTableShowsFailureCause(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sha := strings.Repeat("ab", 32)
	reason := "paused after 1 failure(s): 1 failure(s) reached max_failures=1"
	s := statusJSON{Group: "web", At: now,
		Desired: &coordinator.Desired{SHA: sha, CommittedAt: now.Add(-time.Minute), Author: "ops"},
		Gate:    gateJSON{Open: false, Reason: reason, MaxParallel: 1},
		Nodes: []coordinator.NodeState{
			{Node: "n1", SHA: sha, Desired: sha, State: coordinator.StatePaused, Error: reason, Since: now.Add(-30 * time.Second)},
		},
		Failures: []coordinator.Failure{{Node: "n1", SHA: sha, Error: "new container is not healthy: exited (exit code 3)", At: now.Add(-40 * time.Second)}},
	}
	var out bytes.Buffer
	if err := printTable(&out, s); err != nil {
		t.Fatal(err)
	}
	want := "failure on n1 40s ago: new container is not healthy: exited (exit code 3)"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("table lacks %q:\n%s", want, out.String())
	}
}
