package agent

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A replace step that fails as the agent stops is cut off by the stop,
// including a hook killed by the stop's signal a moment before the
// agent's own signal lands; any other failure is the release's.
func TestCutOffByStop(t *testing.T) {
	killed := &killedError{sig: syscall.SIGTERM, err: errors.New("signal: terminated")}
	tests := []struct {
		name     string
		err      error
		stopIn   time.Duration // when the agent's stop comes; <0: never
		wantStop bool
	}{
		{"hook fails, agent runs on", errors.New("exit status 3"), -1, false},
		{"hook killed, agent runs on", killed, -1, false},
		{"hook fails while the agent stops", errors.New("exit status 143"), 0, true},
		{"hook killed, the agent's own signal just after", killed, 50 * time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			switch {
			case tc.stopIn == 0:
				stop()
			case tc.stopIn > 0:
				time.AfterFunc(tc.stopIn, stop)
			}
			tr := &turn{a: &Agent{log: hclog.NewNullLogger()}, stopping: ctx}
			if got := tr.cutOffByStop(tc.err); got != tc.wantStop {
				t.Fatalf("cutOffByStop(%v) = %v, want %v", tc.err, got, tc.wantStop)
			}
		})
	}
}

// A hook's end by a signal is told apart from its deadline's kill, which
// is the agent's own, and from a failure.
func TestExecTellsAKillFromOutside(t *testing.T) {
	tests := []struct {
		name, script string
		outside      bool
	}{
		{"killed from outside", "kill -TERM $$", true},
		{"killed at its deadline", "sleep 5", false},
		{"fails", "exit 3", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &Exec{ReplaceCmd: []string{"sh", "-c", tc.script}, StateDir: t.TempDir(), Group: "g", Node: "n1",
				HookTimeout: 200 * time.Millisecond}
			err := e.run(context.Background(), hookReplace, "sha", nil)
			var ke *killedError
			if err == nil || errors.As(err, &ke) != tc.outside {
				t.Fatalf("run = %v; want a failure, killed from outside: %v", err, tc.outside)
			}
		})
	}
}
