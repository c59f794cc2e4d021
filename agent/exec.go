package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

const (
	// DefaultHookTimeout bounds one run of the replace hook.
	DefaultHookTimeout = 10 * time.Minute
	// DefaultHealthTimeout bounds one run of the health hook.
	DefaultHealthTimeout = 30 * time.Second
)

// Exec replaces a node's workload by running user commands, for hosts
// without Docker (for example InfraKit-style reprovisioning). The replace
// hook is run with ROLLAGENT_GROUP, ROLLAGENT_NODE, ROLLAGENT_SHA and
// ROLLAGENT_SPEC (a JSON file of the spec); the health hook exits 0 while the
// workload is healthy. Because a command leaves no label behind, the SHA it
// installed is kept in a small state file, written before and after each
// replacement so that a restarted agent knows whether one was interrupted.
type Exec struct {
	ReplaceCmd []string
	HealthCmd  []string
	StateDir   string
	Group      string
	Node       string
	Log        hclog.Logger
	// HookTimeout bounds one run of the replace hook. It is also the step
	// bound in the node's claim lease: a node that dies mid-step keeps its
	// slot until a waiter has seen it gone for HookTimeout + twice
	// healthy_deadline + 40 s (Agent.lease). Optional, defaults to
	// DefaultHookTimeout.
	HookTimeout time.Duration
}

type execState struct {
	SHA     string `json:"sha"`               // installed and verified
	Pending string `json:"pending,omitempty"` // being installed
	// Ran says the replace hook for Pending ran to its end. Without it, a
	// restarted agent cannot tell a hook killed with its agent, whose
	// install is cut off, from one that finished and awaits verification.
	Ran bool `json:"ran,omitempty"`
}

func (e *Exec) statePath() string { return filepath.Join(e.StateDir, e.Group+"-"+e.Node+".json") }
func (e *Exec) specPath(sha string) string {
	return filepath.Join(e.StateDir, "specs", sha+".json")
}

func (e *Exec) load() (execState, error) {
	var st execState
	b, err := os.ReadFile(e.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", e.statePath(), err)
	}
	return st, nil
}

// save writes the state file atomically: a crash leaves the old or the new.
func (e *Exec) save(st execState) error {
	b, _ := json.Marshal(st)
	tmp := e.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, e.statePath())
}

// Inspect reads the installed SHA from the state file.
func (e *Exec) Inspect(context.Context) (Observed, error) {
	st, err := e.load()
	if err != nil {
		return Observed{}, err
	}
	if st.Pending != "" {
		// The hook may have got as far as installing it: what runs is
		// what the pending install made, until verified or undone.
		return Observed{SHA: st.Pending, Leftover: true}, nil
	}
	return Observed{SHA: st.SHA}, nil
}

// StepTimeout bounds one destructive step: a run of the replace hook.
func (e *Exec) StepTimeout() time.Duration {
	if e.HookTimeout > 0 {
		return e.HookTimeout
	}
	return DefaultHookTimeout
}

// Prepare stores the spec where the hook will read it.
func (e *Exec) Prepare(_ context.Context, spec *hashspec.Spec, sha string) error {
	b, err := spec.Canonical()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(e.specPath(sha)), 0o700); err != nil {
		return err
	}
	return os.WriteFile(e.specPath(sha), b, 0o600)
}

// Replace runs the replace hook for sha, after its fence.
func (e *Exec) Replace(ctx context.Context, _ *hashspec.Spec, sha string, step StepFunc) error {
	st, err := e.load()
	if err != nil {
		return err
	}
	if err := step(ctx, "run replace hook"); err != nil {
		return err
	}
	st.Pending, st.Ran = sha, false
	if err := e.save(st); err != nil {
		return err
	}
	if err := e.run(ctx, e.ReplaceCmd, sha, e.StepTimeout()); err != nil {
		return err
	}
	st.Ran = true
	return e.save(st)
}

func (e *Exec) run(ctx context.Context, argv []string, sha string, timeout time.Duration) error {
	if len(argv) == 0 {
		return errors.New("exec runtime: no command configured")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The hook's output goes to a file, not a pipe: a replace hook that
	// starts the workload in the background leaves it holding the hook's
	// stdout and stderr, and reading a pipe to EOF would wait for the
	// workload to exit, holding the slot (the timeout cannot end that wait).
	out, err := os.CreateTemp(e.StateDir, ".hook-*.out")
	if err != nil {
		return fmt.Errorf("hook output file: %w", err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "ROLLAGENT_GROUP="+e.Group, "ROLLAGENT_NODE="+e.Node,
		"ROLLAGENT_SHA="+sha, "ROLLAGENT_SPEC="+e.specPath(sha))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		msg := make([]byte, 2000)
		n, _ := out.ReadAt(msg, 0)
		// Trimmed: hook output nearly always ends in a newline, which would
		// end up inside every record and log line that quotes the error.
		return fmt.Errorf("%s: %w: %.500s", argv[0], err, strings.TrimSpace(string(msg[:n])))
	}
	return nil
}

// WaitHealthy runs the health hook every second until it has passed for
// min_healthy_time, failing at healthy_deadline.
func (e *Exec) WaitHealthy(ctx context.Context, spec *hashspec.Spec) error {
	if st, err := e.load(); err == nil && st.Pending != "" && !st.Ran {
		// Killed with its agent: the step was cut off, and the release
		// did not fail. It is undone, and the node replaced afresh.
		return fmt.Errorf("the replace hook for %s was cut off before its end: %w", coordinator.ShortSHA(st.Pending), errInterrupted)
	}
	u := spec.Update
	ctx, cancel := context.WithTimeout(ctx, u.HealthyDeadline.Std())
	defer cancel()
	var since time.Time
	last := "not run"
	for {
		if ok, why := e.Healthy(ctx); ok {
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= u.MinHealthyTime.Std() {
				return nil
			}
		} else {
			since, last = time.Time{}, why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy for %s within healthy_deadline %s: %s", u.MinHealthyTime, u.HealthyDeadline, last)
		case <-time.After(time.Second):
		}
	}
}

// Finish records the pending SHA as installed.
func (e *Exec) Finish(context.Context) error {
	st, err := e.load()
	if err != nil || st.Pending == "" {
		return err
	}
	return e.save(execState{SHA: st.Pending})
}

// Restore reinstalls the previous SHA when sha was being installed.
func (e *Exec) Restore(ctx context.Context, sha string) error {
	st, err := e.load()
	if err != nil || st.Pending != sha || sha == "" {
		return err
	}
	if st.SHA != "" {
		if err := e.run(ctx, e.ReplaceCmd, st.SHA, e.StepTimeout()); err != nil {
			return fmt.Errorf("reinstall %s: %w", coordinator.ShortSHA(st.SHA), err)
		}
	}
	return e.save(execState{SHA: st.SHA})
}

// Healthy runs the health hook once.
func (e *Exec) Healthy(ctx context.Context) (bool, string) {
	st, _ := e.load()
	sha := st.Pending
	if sha == "" {
		sha = st.SHA
	}
	if err := e.run(ctx, e.HealthCmd, sha, DefaultHealthTimeout); err != nil {
		return false, err.Error()
	}
	return true, "health hook passed"
}
