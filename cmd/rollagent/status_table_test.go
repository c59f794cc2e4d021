package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// tableNow is the moment the status table tests print their tables at.
var tableNow = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// A paused group's table names what failed, where and when, not only that
// it paused: every node's error says "paused" by then.
func TestStatusTableShowsFailureCause(t *testing.T) {
	now := tableNow
	sha := strings.Repeat("ab", 32)
	reason := "paused after 1 failure(s): 1 failure(s) reached max_failures=1"
	s := statusJSON{Group: "web", At: now,
		Desired: &coordinator.Desired{SHA: sha, CommittedAt: now.Add(-time.Minute), Author: "ops"},
		Gate:    gateJSON{Open: false, Reason: reason, MaxParallel: 1},
		Nodes: rows(
			coordinator.NodeState{Node: "n1", SHA: sha, Desired: sha, State: coordinator.StatePaused, Error: reason, Since: now.Add(-30 * time.Second)},
		),
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

// Values in KV are anyone's with KV write: a node's error with a newline
// or an escape sequence in it keeps to its row, and the terminal gets no
// escape to obey.
func TestStatusTableKeepsKVValuesToOneLine(t *testing.T) {
	now := tableNow
	sha := strings.Repeat("ab", 32)
	s := statusJSON{Group: "web", At: now,
		Desired: &coordinator.Desired{SHA: sha, CommittedAt: now.Add(-time.Minute), Author: "ops\x1b]0;owned\x07"},
		Gate:    gateJSON{Open: true, Reason: "open", MaxParallel: 1},
		Nodes: rows(
			coordinator.NodeState{Node: "n1", SHA: sha, Desired: sha, State: coordinator.StateFailed, Since: now,
				Error: "health: unhealthy (last probe exit 1: boom\n)\x1b[2J\u202eevil\tcell"},
			coordinator.NodeState{Node: "n2", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: now},
		),
		Problems: []string{"nodes/x:\nnot a valid record"},
	}
	var out bytes.Buffer
	if err := printTable(&out, s); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.ContainsAny(got, "\x1b\x07\t\u202e") {
		t.Fatalf("table passes control characters through: %q", got)
	}
	for _, want := range []string{"by ops ]0;owned\n", "boom ) [2J evil cell\n", "problem: nodes/x: not a valid record\n"} {
		if !strings.Contains(got, want) {
			t.Fatalf("table lacks %q:\n%s", want, got)
		}
	}
	if lines := strings.Count(got, "\n"); lines != 7 {
		t.Fatalf("want 7 lines (group, gate, progress, header, 2 nodes, 1 problem), got %d:\n%s", lines, got)
	}
}

// rows are the table rows of records counted by their published state.
func rows(ns ...coordinator.NodeState) []nodeJSON {
	out := make([]nodeJSON, 0, len(ns))
	for _, n := range ns {
		since := n.Since
		out = append(out, nodeJSON{Node: n.Node, SHA: n.SHA, Desired: n.Desired, State: n.State, Since: &since,
			Error: n.Error, CountedAs: coordinator.Standing(n.State), Consul: coordinator.PresenceRegistered, Counts: true})
	}
	return out
}

// An orphaned claim is either lost or counting: no clock ends a claim, so
// the table has a line for each and no third.
func TestStatusTableOrphanedClaims(t *testing.T) {
	now := tableNow
	sha := strings.Repeat("ab", 32)
	since := now.Add(-time.Minute)
	for _, tt := range []struct {
		name  string
		claim claimJSON
		want  string
	}{
		{"counting, its lease long past", claimJSON{Name: "n2", Since: since.Add(-time.Hour), Until: since.Add(-50 * time.Minute), Counts: true},
			"slot held by n2 for 1h1m0s, its agent gone: it counts as down until it is back, or until a node in line that saw it gone for its lease (10m0s) records it lost\n"},
		{"counting, within its lease", claimJSON{Name: "n2", Since: since, Until: since.Add(13 * time.Minute), Counts: true},
			"slot held by n2 for 1m0s, its agent gone: it counts as down until it is back, or until a node in line that saw it gone for its lease (13m0s) records it lost\n"},
		{"lost", claimJSON{Name: "n2", Since: since, Until: since.Add(13 * time.Minute), Lost: true},
			"slot of n2: lost (not back by its lease); recorded failed, no longer counts\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := statusJSON{Group: "web", At: now,
				Desired: &coordinator.Desired{SHA: sha, CommittedAt: since, Author: "ops"},
				Gate:    gateJSON{Open: true, Reason: "open", MaxParallel: 1},
				Orphans: []claimJSON{tt.claim},
			}
			var out bytes.Buffer
			if err := printTable(&out, s); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); !strings.Contains(got, tt.want) || strings.Count(got, "n2") != 1 {
				t.Fatalf("want the one line %q:\n%s", tt.want, got)
			}
		})
	}
}
