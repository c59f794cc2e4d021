package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

// Status names the canaries, marks their rows, and says what promotes the
// rest: `rollagent promote`, the healthy time, or the promotion made.
func TestStatusShowsCanaries(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		auto     bool
		promoted bool
		gate     coordinator.GateState
		line     string
	}{
		{"by hand", false, false, coordinator.GateAwaitingPromotion, "canaries: n1; rollagent promote web promotes the rest"},
		{"auto", true, false, coordinator.GateAwaitingPromotion, "canaries: n1; auto-promote once healthy for 10m0s"},
		{"promoted", false, true, coordinator.GateOpen, "canaries: n1; promoted by ops@host 1m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroupPairs(t, at).respec(func(s *hashspec.Spec) {
				s.Update.Canary = 1
				if tc.auto {
					s.Update.AutoPromote, s.Update.CanaryHealthyTime = true, hashspec.Duration(10*time.Minute)
				}
			}).desired()
			g.put(g.k.Canaries(g.sha), coordinator.Canaries{SHA: g.sha, Nodes: []string{"n1"}, At: at})
			if tc.promoted {
				g.put(g.k.Promoted(g.sha), coordinator.Promotion{SHA: g.sha, By: "ops@host", At: at})
			}
			g.node("n1", g.sha, coordinator.StateConverged, at).node("n2", "", coordinator.StateWaiting, at)
			s := newStatusJSON(coordinator.Parse(g.k, "web", g.pairs, 1), statusOptions{LostAfter: coordinator.DefaultLostAfter}, at.Add(time.Minute))
			if s.Gate.State != tc.gate || s.Canary == nil || strings.Join(s.Canary.Nodes, ",") != "n1" || s.Canary.AutoPromote != tc.auto {
				t.Fatalf("gate %s, canary %+v", s.Gate.State, s.Canary)
			}
			if !s.Nodes[0].Canary || s.Nodes[1].Canary {
				t.Fatalf("rows %+v: want n1 marked the canary, n2 not", s.Nodes)
			}
			var out bytes.Buffer
			if err := printTable(&out, s); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.line) {
				t.Fatalf("status:\n%s\nwant a line with %q", out.String(), tc.line)
			}
		})
	}
}
