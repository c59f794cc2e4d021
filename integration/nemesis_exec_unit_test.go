package integration

import (
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/forkhook"
)

// TestExecID checks that an exec host's install, stood for a container,
// gives back its hook's start as the container's Created time, and that
// a Docker ID is not taken for one.
func TestExecID(t *testing.T) {
	started := time.Date(2025, 1, 2, 3, 4, 5, 678901234, time.UTC)
	id := execID("h1", forkhook.Installed{SHA: "0123456789abcdef0123", Started: started})
	if at, ok := execCreated(id); !ok || !at.Equal(started) {
		t.Errorf("execCreated(%q) = %s, %v; want %s", id, at, ok, started)
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
