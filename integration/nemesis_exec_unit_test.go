package integration

import (
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/fleetwatch"
	"github.com/rollagent/rollagent/internal/forkhook"
)

// TestExecID checks that an exec host's install, stood for a container,
// gives back its hook's start as the container's Created time, and that
// a Docker ID is not taken for one.
func TestExecID(t *testing.T) {
	started := time.Date(2025, 1, 2, 3, 4, 5, 678901234, time.UTC)
	landed := started.Add(3 * time.Second)
	id := execID("h1", forkhook.Installed{SHA: "0123456789abcdef0123", Started: started, Landed: landed})
	if at, ok := execCreated(id); !ok || !at.Equal(started) {
		t.Errorf("execCreated(%q) = %s, %v; want %s", id, at, ok, started)
	}
	if at, ok := execLanded(id); !ok || !at.Equal(landed) {
		t.Errorf("execLanded(%q) = %s, %v; want %s", id, at, ok, landed)
	}
	if _, ok := execLanded(execID("h1", forkhook.Installed{SHA: "0123456789abcdef0123", Started: started})); ok {
		t.Error("an install without its landing time gave one")
	}
	if len(id) < 12 {
		t.Errorf("execID %q is shorter than the 12 characters a violation key takes", id)
	}
	if _, ok := execCreated("4f1c0a3b2d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a"); ok {
		t.Error("a Docker container ID was taken for an exec install")
	}
}

func TestDescends(t *testing.T) {
	// init 10 -> agent 11 -> hook 12 -> child 13; workload 14 under init.
	parent := map[int]int{10: 1, 11: 10, 12: 11, 13: 12, 14: 10}
	for _, tc := range []struct {
		pid, root int
		want      bool
	}{{13, 11, true}, {12, 11, true}, {14, 11, false}, {11, 11, false}, {13, 10, true}, {99, 10, false}} {
		if got := descends(parent, tc.pid, tc.root); got != tc.want {
			t.Errorf("descends(%d, %d) = %v, want %v", tc.pid, tc.root, got, tc.want)
		}
	}
}

// TestOverruns checks that a commit whose drawn installs may outlast
// --hook-timeout is known ahead not to converge, and a good one is not.
func TestOverruns(t *testing.T) {
	for _, tc := range []struct {
		install string
		want    bool
	}{{installGood, false}, {"25000-28000", true}, {"bad", true}} {
		spec := fleettest.Spec(t, fleettest.SpecOptions{Group: "g", Image: "x:1", MaxParallel: 1, FailureAction: "pause",
			MaxFailures: 1, HealthyDeadline: time.Minute, Env: map[string]string{forkhook.EnvInstall: tc.install}})
		if got := overruns(spec, "sha"); got != tc.want {
			t.Errorf("overruns with %s = %v, want %v", tc.install, got, tc.want)
		}
	}
}

// TestOutOfStep checks how invariant (e) places an install's landing
// against the reads of Consul around it.
func TestOutOfStep(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	look := func(from float64, in bool, since float64, index uint64) stepLook {
		return stepLook{from: at(from), to: at(from + 0.1), in: in, since: at(since), index: index}
	}
	out1, out2 := look(0, false, -5, 10), look(1, false, -5, 10)
	for _, tc := range []struct {
		name   string
		looks  []stepLook
		landed float64
		want   bool
	}{
		{"between two reads out of a step", []stepLook{out1, out2}, 0.5, true},
		{"during the later read: the read may have seen it", []stepLook{out1, out2}, 1.05, false},
		{"during the earlier read", []stepLook{out1, out2}, 0.05, false},
		{"a step ended between the reads, after it landed", []stepLook{out1, look(1, false, 0.7, 12)}, 0.5, false},
		{"a step ended between the reads, before it landed", []stepLook{look(0, true, -1, 10), look(1, false, 0.3, 12)}, 0.5, true},
		{"within the margin of the step's end", []stepLook{look(0, true, -1, 10), look(1, false, 0.45, 12)}, 0.5, false},
		{"in a step at the later read", []stepLook{out1, look(1, true, 0.2, 12)}, 0.5, false},
		{"a stale later read", []stepLook{look(0, false, -5, 12), look(1, false, -5, 10)}, 0.5, false},
		{"no record at the later read", []stepLook{out1, {from: at(1), to: at(1.1), index: 10}}, 0.5, false},
		{"no read after it yet", []stepLook{out1, out2}, 2, false},
		{"no landing time", []stepLook{out1, out2}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			landed := time.Time{}
			if tc.landed != 0 {
				landed = at(tc.landed)
			}
			if _, _, got := outOfStep(tc.looks, landed); got != tc.want {
				t.Errorf("outOfStep = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCheckHooksRace replays, sample by sample, an install that lands
// between a sample's Docker read and its Consul read, just before a quick
// verify and release: the Consul read shows the node out of its step,
// the next sample the new install. That is no violation (seed 614093408
// took it for one). A child that lands after the release, between two
// reads out of any step, is.
func TestCheckHooksRace(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	installed := func(sha string, started, landed float64) fleettest.Workload {
		id := execID("h1", forkhook.Installed{SHA: sha, Started: at(started), Landed: at(landed)})
		return fleettest.Workload{SHAs: []string{sha}, IDs: []string{id}, Managed: id, Healthy: true}
	}
	rec := func(state coordinator.NodeStatus, sha string, since float64) coordinator.NodeState {
		return coordinator.NodeState{Node: "h1", State: state, SHA: sha, Since: at(since)}
	}
	sample := func(w fleettest.Workload, from float64, r coordinator.NodeState) *fleetwatch.Sample {
		return &fleetwatch.Sample{Group: hks, Workloads: map[string]fleettest.Workload{"h1": w},
			State: &coordinator.GroupState{Nodes: []coordinator.NodeState{r}}, StateFrom: at(from), StateTo: at(from + 0.05)}
	}
	old, newer := installed("aaaa", -60, -59), installed("bbbb", 1, 4.0)
	for _, tc := range []struct {
		name    string
		samples []*fleetwatch.Sample
		want    int
	}{
		{"landed between the Docker and the Consul read of a sample", []*fleetwatch.Sample{
			sample(old, 3, rec(coordinator.StateReplacing, "aaaa", 1)),
			sample(old, 4.5, rec(coordinator.StateConverged, "bbbb", 4.3)), // Docker read at 3.9, before the install
			sample(newer, 5, rec(coordinator.StateConverged, "bbbb", 4.3)),
		}, 0},
		{"landed after the release, between two reads out of a step", []*fleetwatch.Sample{
			sample(old, 3, rec(coordinator.StateConverged, "bbbb", 2.5)),
			sample(old, 4.5, rec(coordinator.StateConverged, "bbbb", 2.5)),
			sample(installed("bbbb", 1, 4.6), 5, rec(coordinator.StateConverged, "bbbb", 2.5)),
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ck := &checker{n: &nemesis{start: t0, vseen: map[string]int{}}}
			for _, s := range tc.samples {
				ck.checkHooks(hks, s)
			}
			if got := len(ck.n.violations); got != tc.want {
				t.Errorf("%d violations, want %d: %v", got, tc.want, ck.n.violations)
			}
		})
	}
}
