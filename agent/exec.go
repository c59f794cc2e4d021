package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

const (
	// DefaultHookTimeout bounds one run of the replace hook.
	DefaultHookTimeout = 10 * time.Minute
	// healthTimeout bounds one run of the health hook.
	healthTimeout = 30 * time.Second
)

// Exec replaces a node's workload by running user commands, for hosts
// without Docker (for example InfraKit-style reprovisioning). The replace
// hook is run with ROLLAGENT_GROUP, ROLLAGENT_NODE, ROLLAGENT_SHA and
// ROLLAGENT_SPEC (a JSON file of the spec), PATH and PassEnv, nothing else
// of the agent's environment; the health hook exits 0 while the
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
	// PassEnv names the variables of the agent's environment that the
	// hooks get besides PATH and the ROLLAGENT_* variables of the run
	// (CheckHookEnv refuses CONSUL_* and ROLLAGENT_* names). Nothing else
	// is passed: the agent's environment holds its Consul token. Optional.
	PassEnv []string
	// DownAfter is how long the health hook must fail in a row before the
	// workload is taken for down (Health): one failed run is not a node
	// down. Optional, defaults to DefaultDownAfter.
	DownAfter time.Duration

	history downHistory // of the runs Health judged
	// running is the process group of the replace hook this process runs
	// now, 0 when none: a group the state file names that is not this one
	// was left by an agent killed mid-hook (see Healthy).
	running atomic.Int64
}

type execState struct {
	SHA     string `json:"sha"`               // installed and verified
	Pending string `json:"pending,omitempty"` // being installed
	// Ran says the replace hook for Pending ran to its end. Without it, a
	// restarted agent cannot tell a hook killed with its agent, whose
	// install is cut off, from one that finished and awaits verification.
	Ran bool `json:"ran,omitempty"`
	// Hook is the process group of the replace hook while it runs: an
	// agent killed meanwhile leaves it running (outside a unit that kills
	// it with the agent), and its successor kills it before it undoes.
	Hook int `json:"hook,omitempty"`
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
	err = e.run(ctx, hookReplace, sha, e.saveHook(&st))
	e.running.Store(0)
	st.Hook = 0
	if err != nil {
		_ = e.save(st) // its group is gone: nothing is left to kill
		return err
	}
	st.Ran = true
	return e.save(st)
}

// saveHook returns what records, in st and the state file, the process
// group of the replace hook just started.
func (e *Exec) saveHook(st *execState) func(int) error {
	return func(pgid int) error {
		st.Hook = pgid
		e.running.Store(int64(pgid))
		return e.save(*st)
	}
}

// killLeft kills the replace hook that a killed agent left running, if st
// names one whose group still runs with this node's hooks' environment:
// the group's ID may since have gone to another process.
func (e *Exec) killLeft(st execState) error {
	if !e.leftRunning(st) {
		return nil
	}
	if err := reapGroup(st.Hook); err != nil {
		return fmt.Errorf("the replace hook left running by the previous agent: %w", err)
	}
	return nil
}

// leftRunning says st names a replace hook that still runs, with this
// node's hooks' environment (the group's ID may since have gone to another
// process), and that this process does not run: an agent killed mid-hook
// left it.
func (e *Exec) leftRunning(st execState) bool {
	if st.Hook <= 0 || int64(st.Hook) == e.running.Load() {
		return false
	}
	return groupHasEnv(st.Hook, [][]byte{[]byte("ROLLAGENT_GROUP=" + e.Group), []byte("ROLLAGENT_NODE=" + e.Node)})
}

// hook names which of the two hooks a run is.
type hook int

const (
	hookReplace hook = iota
	hookHealth
)

// run runs h for sha in a process group of its own and, unless it is a
// replace hook that succeeded (which may leave the workload running in
// the background), kills what is left of the group and waits for it to be
// gone before returning: nothing a failed or overdue hook started may
// carry on into the undo, the record and the release.
func (e *Exec) run(ctx context.Context, h hook, sha string, started func(pgid int) error) error {
	argv, timeout := e.ReplaceCmd, e.StepTimeout()
	if h == hookHealth {
		argv, timeout = e.HealthCmd, healthTimeout
	}
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
	cmd.Env = hookEnv(os.Environ(), e.PassEnv, e.Group, e.Node, sha, e.specPath(sha))
	cmd.Stdout, cmd.Stderr = out, out
	inOwnGroup(cmd)
	if err = cmd.Start(); err == nil {
		var serr error
		if started != nil {
			if serr = started(cmd.Process.Pid); serr != nil {
				_ = killGroup(cmd.Process.Pid) // unrecorded, it could outlive a killed agent
			}
		}
		if err = cmd.Wait(); serr != nil {
			err = serr
		}
	}
	if cmd.Process != nil && (err != nil || h == hookHealth) {
		if rerr := reapGroup(cmd.Process.Pid); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		msg := make([]byte, 2000)
		n, _ := out.ReadAt(msg, 0)
		// Trimmed: hook output nearly always ends in a newline, which would
		// end up inside every record and log line that quotes the error.
		return fmt.Errorf("%s: %w: %.500s", argv[0], killedBy(ctx, err), strings.TrimSpace(string(msg[:n])))
	}
	return nil
}

// killedBy marks err as a kill by a signal the agent did not send: ctx,
// the run's own, has not ended, so its deadline's kill did not send it.
func killedBy(ctx context.Context, err error) error {
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &killedError{sig: ws.Signal(), err: err}
	}
	return err
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
	if err != nil {
		return err
	}
	if err := e.killLeft(st); err != nil {
		return err
	}
	if st.Pending != sha || sha == "" {
		return nil
	}
	if st.SHA != "" {
		if err := e.run(ctx, hookReplace, st.SHA, e.saveHook(&st)); err != nil {
			st.Hook = 0
			_ = e.save(st) // its group is gone
			return fmt.Errorf("reinstall %s: %w", coordinator.ShortSHA(st.SHA), err)
		}
	}
	return e.save(execState{SHA: st.SHA})
}

// Health runs the health hook once and judges it with the runs before:
// down once it has failed in a row for DownAfter.
func (e *Exec) Health(ctx context.Context) (Health, string) {
	ok, why := e.Healthy(ctx)
	if !ok && errors.Is(ctx.Err(), context.Canceled) {
		return HealthFailing, why // cut off by its caller: no reading (a deadline is one)
	}
	return e.history.judge(ok, time.Now(), cmp.Or(e.DownAfter, DefaultDownAfter)), why
}

// Healthy runs the health hook once. A replace hook that a killed agent
// left running makes the workload unhealthy whatever the health hook says:
// it may change what runs at any moment, so the node must not release its
// slot (under a closed gate) nor count as verified until an undo, under
// the slot, has killed it (Restore).
func (e *Exec) Healthy(ctx context.Context) (bool, string) {
	st, _ := e.load()
	if e.leftRunning(st) {
		return false, fmt.Sprintf("the replace hook a killed agent left (process group %d) still runs", st.Hook)
	}
	sha := st.Pending
	if sha == "" {
		sha = st.SHA
	}
	if err := e.run(ctx, hookHealth, sha, nil); err != nil {
		return false, err.Error()
	}
	return true, "health hook passed"
}
