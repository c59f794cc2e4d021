package fleetwatch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/lockstep"
)

func TestDownOf(t *testing.T) {
	ws := map[string]Workload{
		"up":       {Healthy: true, Serving: true, Status: []string{"/x-up: Up 3 seconds (healthy)"}},
		"starting": {Status: []string{"/x-starting: Up 1 second (health: starting)"}},
		"prev":     {Serving: true, Status: []string{"/x-prev-prev: Up 9 seconds (healthy)"}},
	}
	nodes := []string{"up", "starting", "prev", "gone"}
	for _, tc := range []struct {
		name  string
		judge Judge
		want  []string
	}{
		{"unhealthy counts starting, a healthy one under the other name and an absent node", Unhealthy, []string{"starting", "prev", "gone"}},
		{"unserved counts a node with no healthy container under either name", Unserved, []string{"starting", "gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			down, why := DownOf(ws, nodes, tc.judge)
			if !slices.Equal(down, tc.want) || len(why) != len(down) {
				t.Fatalf("DownOf = %v, %v; want %v", down, why, tc.want)
			}
		})
	}
}

func TestViolations(t *testing.T) {
	tl := Tally{Samples: 12, MaxDown: 2, MaxHolding: 1, MaxBusy: 2, Worst: "at +1s"}
	for _, tc := range []struct {
		name string
		b    Bounds
		want []string
	}{
		{"within", Bounds{Down: 2, Holding: 1, Busy: 2, MinSamples: 10}, nil},
		{"down over", AtMost(1), []string{"2 down at once, want at most 1"}},
		{"unbounded", Bounds{Down: Unbounded, Holding: Unbounded, Busy: Unbounded}, nil},
		{"busy over", Bounds{Down: Unbounded, Holding: Unbounded, Busy: 1}, []string{"2 nodes mid-replacement"}},
		{"too few samples", Bounds{Down: 2, Holding: 1, Busy: 2, MinSamples: 13}, []string{"only 12 samples"}},
		{"none down allowed", Bounds{Down: 0, Holding: Unbounded, Busy: Unbounded}, []string{"2 down at once, want at most 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tl.violations(tc.b)
			if len(got) != len(tc.want) {
				t.Fatalf("violations = %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("violation %d = %q, want it to begin %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// script is a probe and a state reader that answer from a list of
// samples, the last one over and over.
type script struct {
	mu    sync.Mutex
	steps []step
	i     int
}

type step struct {
	ws       map[string]Workload
	probeErr error
	holders  int
	busy     int
	stateErr error
}

func (s *script) cur() step {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steps[min(s.i, len(s.steps)-1)]
}

func (s *script) probe(context.Context, string, []string) (map[string]Workload, error) {
	st := s.cur()
	if st.probeErr != nil {
		s.next()
	}
	return st.ws, st.probeErr
}

func (s *script) next() {
	s.mu.Lock()
	s.i++
	s.mu.Unlock()
}

func (s *script) state(context.Context, string) (*coordinator.GroupState, error) {
	st := s.cur()
	s.next()
	if st.stateErr != nil {
		return nil, st.stateErr
	}
	gs := &coordinator.GroupState{Holders: &lockstep.Holders{Holding: map[string]lockstep.Entry{}}}
	for i := range st.holders {
		gs.Holders.Holding[string(rune('a'+i))] = lockstep.Entry{}
	}
	for range st.busy {
		gs.Nodes = append(gs.Nodes, coordinator.NodeState{State: coordinator.StateReplacing})
	}
	return gs, nil
}

// TestMonitorKeepsTheWorst runs a monitor over a scripted group and checks
// what it counts: every node, the worst sample first seen, a failed read
// counted as unanswered and left out.
func TestMonitorKeepsTheWorst(t *testing.T) {
	up := Workload{Healthy: true}
	sc := &script{steps: []step{
		{ws: map[string]Workload{"n1": up, "n2": up, "n3": up}, holders: 1},
		{ws: map[string]Workload{"n1": up}, holders: 2, busy: 1}, // n2 unhealthy, n3 gone
		{probeErr: errors.New("daemon restarting")},
		{ws: map[string]Workload{"n1": up, "n2": up}, stateErr: errors.New("no leader")},
		{ws: map[string]Workload{"n1": up, "n2": up, "n3": up}, holders: 0},
	}}
	var mu sync.Mutex
	var seen []int
	m := Start(Options{Groups: map[string][]string{"g": {"n1", "n2", "n3"}}, Probe: sc.probe, State: sc.state,
		Every: time.Millisecond, Observe: func(s *Sample) {
			mu.Lock()
			seen = append(seen, len(s.Down))
			mu.Unlock()
		}})
	waitRounds(t, m, 8)
	tl := m.Tally("g")
	if tl.MaxDown != 2 || !strings.Contains(tl.Worst, "[n2 n3] down") {
		t.Errorf("MaxDown %d, Worst %q; want 2, [n2 n3]", tl.MaxDown, tl.Worst)
	}
	if tl.MaxHolding != 2 || tl.MaxBusy != 1 {
		t.Errorf("MaxHolding %d, MaxBusy %d; want 2, 1", tl.MaxHolding, tl.MaxBusy)
	}
	if tl.Unanswered != 2 || tl.Samples != m.Rounds()-1 {
		t.Errorf("Samples %d, Unanswered %d in %d rounds; want every round but the probe's failure, and 2", tl.Samples, tl.Unanswered, m.Rounds())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != m.Rounds() || seen[1] != 2 {
		t.Errorf("Observe saw %v in %d rounds", seen, m.Rounds())
	}
}

// TestMonitorEachNode checks that a per-node probe reads every node and a
// state-only monitor counts what Consul says.
func TestMonitorEachNode(t *testing.T) {
	p := EachNode(func(_ context.Context, node string) Workload {
		return Workload{Healthy: node != "h2", Status: []string{"installed: " + node}}
	})
	ws, err := p(t.Context(), "hooks", []string{"h1", "h2", "h3"})
	if err != nil || len(ws) != 3 {
		t.Fatalf("EachNode read %v, %v", ws, err)
	}
	if down, _ := DownOf(ws, []string{"h1", "h2", "h3"}, Unhealthy); !slices.Equal(down, []string{"h2"}) {
		t.Fatalf("down %v, want [h2]", down)
	}
	sc := &script{steps: []step{{busy: 2}, {stateErr: errors.New("no leader")}, {busy: 1}}}
	m := Start(Options{Groups: map[string][]string{"g": {"n1"}}, State: sc.state, Every: time.Millisecond})
	waitRounds(t, m, 4)
	if tl := m.Tally("g"); tl.MaxBusy != 2 || tl.MaxDown != 0 || tl.Unanswered != 1 || tl.Samples != m.Rounds()-1 {
		t.Fatalf("tally %+v in %d rounds", tl, m.Rounds())
	}
}

// waitRounds waits, bounded, for m to sample n rounds, and stops it.
func waitRounds(t *testing.T, m *Monitor, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.Rounds() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	m.Stop()
	if m.Rounds() < n {
		t.Fatalf("only %d rounds in 10s", m.Rounds())
	}
}

func TestTallyString(t *testing.T) {
	for _, tc := range []struct {
		name string
		tl   Tally
		want string
	}{
		{"docker and consul", Tally{Samples: 5, MaxDown: 1, MaxHolding: 1, MaxBusy: 0, probed: true},
			"5 samples (0 unanswered), at most 1 down, 1 holding a slot, 0 mid-replacement"},
		{"docker alone", Tally{Samples: 5, Unanswered: 2, MaxDown: 2, MaxHolding: -1, MaxBusy: -1, probed: true},
			"5 samples (2 unanswered), at most 2 down"},
		{"consul alone", Tally{Samples: 3, MaxHolding: 0, MaxBusy: 1}, "3 samples (0 unanswered), 0 holding a slot, 1 mid-replacement"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tl.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}
