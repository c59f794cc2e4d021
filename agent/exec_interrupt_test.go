package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/hashspec"
)

// A replace hook killed with its agent leaves its SHA pending, not run to
// its end: the restarted agent must take that for a step cut off, to be
// undone without counting a failure, never verify it for healthy_deadline
// and count the release failed. The failover bench caught the group
// pausing after every agent killed mid-hook.
func TestExecHookCutOffIsAnInterruptedStep(t *testing.T) {
	old, pending := strings.Repeat("a", 64), strings.Repeat("b", 64)
	spec, _, err := hashspec.Load([]byte(`{"name":"g","container":{"image":"x:1"},
		"update":{"min_healthy_time":"1s","healthy_deadline":"5s"}}`), hashspec.FormatJSON, "test spec")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		state       string
		interrupted bool
	}{
		{"hook killed before its end", `{"sha":"` + old + `","pending":"` + pending + `"}`, true},
		{"hook ran to its end", `{"sha":"` + old + `","pending":"` + pending + `","ran":true}`, false},
		{"nothing pending", `{"sha":"` + old + `"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Exec{ReplaceCmd: []string{"true"}, HealthCmd: []string{"true"}, StateDir: t.TempDir(),
				Group: "g", Node: "n1", Log: hclog.NewNullLogger()}
			if err := os.WriteFile(filepath.Join(e.StateDir, "g-n1.json"), []byte(tc.state), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := e.WaitHealthy(ctx, spec)
			if got := errors.Is(err, errInterrupted); got != tc.interrupted {
				t.Fatalf("WaitHealthy = %v; interrupted %v, want %v", err, got, tc.interrupted)
			}
			if !tc.interrupted && err != nil {
				t.Fatalf("WaitHealthy = %v, want healthy", err)
			}
		})
	}
}

// Replace marks its hook's end in the state file, and only its end.
func TestExecReplaceRecordsTheHooksEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		hook string
		ran  bool
	}{
		{"hook succeeds", "true", true},
		{"hook fails", "false", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Exec{ReplaceCmd: []string{tc.hook}, HealthCmd: []string{"true"}, StateDir: t.TempDir(),
				Group: "g", Node: "n1", Log: hclog.NewNullLogger()}
			sha := strings.Repeat("c", 64)
			noFence := func(context.Context, string) error { return nil }
			_ = e.Replace(context.Background(), nil, sha, noFence)
			st, err := e.load()
			if err != nil {
				t.Fatal(err)
			}
			if st.Pending != sha || st.Ran != tc.ran {
				t.Fatalf("state after Replace = %+v, want pending %.12s, ran %v", st, sha, tc.ran)
			}
		})
	}
}
