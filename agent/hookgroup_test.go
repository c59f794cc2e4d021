package agent_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// lateChild is how long a test hook's child sleeps before it writes its
// marker: past every hook deadline these tests set. lateInstall is how
// long an agent's does: past its hook's timeout, undo and release.
const (
	lateChild   = 2 * time.Second
	lateInstall = 5 * time.Second
)

// procEntry is what a test needs of /proc/<pid>/stat.
type procEntry struct {
	pid, ppid, pgid int
	state           byte
}

// listProcs lists every process from /proc, zombies included.
func listProcs(t *testing.T) []procEntry {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []procEntry
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		i := bytes.LastIndexByte(b, ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		out = append(out, procEntry{pid: pid, ppid: ppid, pgid: pgid, state: f[0][0]})
	}
	return out
}

// liveWithEnv lists the processes, zombies aside, whose environment holds
// env: a hook's and every process it started, which inherit it.
func liveWithEnv(t *testing.T, env string) []int {
	t.Helper()
	var pids []int
	for _, p := range listProcs(t) {
		if p.state == 'Z' || p.state == 'X' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "environ"))
		if err == nil && bytes.Contains(append(b, 0), []byte(env+"\x00")) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// killWithEnv kills what liveWithEnv lists, so that a failed test leaves
// no hook child behind.
func killWithEnv(t *testing.T, env string) {
	for _, pid := range liveWithEnv(t, env) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// checkNoLateWrite checks that no process with env is left, then that
// marker does not appear until sleep has passed since began: a child left
// running would write it then.
func checkNoLateWrite(t *testing.T, env, marker string, began time.Time, sleep time.Duration) {
	t.Helper()
	if left := liveWithEnv(t, env); len(left) > 0 {
		t.Errorf("processes %v of the hook still run", left)
	}
	for deadline := began.Add(sleep + 500*time.Millisecond); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the hook's child wrote %s after the hook's run was over", filepath.Base(marker))
	}
}

// A hook's children die with its run: a health hook's always, a replace
// hook's when it fails or overruns its deadline, before the agent goes on
// to undo. On 6d7f554 only the hook's own process was killed, and its
// child wrote the marker after the run had returned. A replace hook that
// succeeds keeps what it started: the workload, run in the background.
func TestExecHookChildrenDieWithTheRun(t *testing.T) {
	child := `sh -c 'sleep ` + strconv.FormatFloat(lateChild.Seconds(), 'f', -1, 64) + `; echo late >"$MARK"'`
	tests := []struct {
		name, script string
		health       bool
		deadline     time.Duration // of the call's context; 0: a minute
		hookTimeout  time.Duration
		wantErr      bool
		childStays   bool
	}{
		{"health hook past its deadline", child, true, 500 * time.Millisecond, 0, true, false},
		{"health hook that forks and passes", child + ` & exit 0`, true, 0, 0, false, false},
		{"replace hook past its timeout", child, false, 0, 500 * time.Millisecond, true, false},
		{"replace hook that forks and fails", child + ` & exit 3`, false, 0, 0, true, false},
		{"replace hook that starts the workload", child + ` & exit 0`, false, 0, 0, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			marker := filepath.Join(dir, "marker")
			script := "export MARK='" + marker + "'; " + tc.script
			e := &agent.Exec{ReplaceCmd: []string{"sh", "-c", script}, HealthCmd: []string{"sh", "-c", script},
				StateDir: dir, Group: "g", Node: "n1", Log: hclog.NewNullLogger(), HookTimeout: tc.hookTimeout}
			env := "MARK=" + marker // in the hook's environment, and so in its children's
			spec, sha, err := hashspec.Load([]byte(`{"container":{"image":"example.com/app:1"}}`), hashspec.FormatJSON, "spec")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killWithEnv(t, env) })
			ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(tc.deadline, time.Minute))
			defer cancel()
			if err := e.Prepare(ctx, spec, sha); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			if tc.health {
				ok, why := e.Healthy(ctx)
				err = map[bool]error{true: nil, false: errString(why)}[ok]
			} else {
				err = e.Replace(ctx, spec, sha, func(context.Context, string) error { return nil })
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("the hook's run returned %v, want an error: %v", err, tc.wantErr)
			}
			if tc.childStays {
				if len(liveWithEnv(t, env)) == 0 {
					t.Fatal("the workload a successful replace hook started in the background was killed")
				}
				return
			}
			checkNoLateWrite(t, env, marker, began, lateChild)
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// startHooks starts node's agent on the exec runtime with the hooks of
// ef.hooks(before), and extra run flags.
func (ef *execFleet) startHooks(node, before string, extra ...string) *proc {
	ef.t.Helper()
	replace, health := ef.hooks(before)
	p := ef.startArgs(node, append([]string{"--runtime=exec", "--state-dir=" + ef.stateDir(node),
		"--replace-cmd=sh", "--replace-cmd=-c", "--replace-cmd=" + replace,
		"--health-cmd=sh", "--health-cmd=-c", "--health-cmd=" + health}, extra...)...)
	ef.procs[node] = p
	return p
}

// kv is the group's failure records and pause for sha and its slot's
// holders, read from Consul's KV at the keys coordinator names.
func (ef *execFleet) kv(sha string) (failures []string, paused bool, holders []string) {
	ef.t.Helper()
	k := ef.keys()
	kv := ef.srv.Client().KV()
	failures, _, err := kv.Keys(k.FailuresPrefix(sha), "", nil)
	if err != nil {
		ef.t.Fatal(err)
	}
	pause, _, err := kv.Get(k.Pause(sha), nil)
	if err != nil {
		ef.t.Fatal(err)
	}
	return failures, pause != nil, groupkit.HolderNames(ef.holders())
}

// slowChild is a hook's before, as for hooks, that for a spec with
// SLOWCHILD in its env installs in a child process, as a package manager
// run by a script would, after sleeping lateInstall, then writes a marker.
// The child and the hook carry lateEnv in their environment.
func (ef *execFleet) slowChild() string {
	return fmt.Sprintf(`if grep -q SLOWCHILD "$ROLLAGENT_SPEC"; then export d %s; sh -c 'sleep %g; cp "$ROLLAGENT_SPEC" "$d/installed.json"; echo late >"$d/marker"'; fi`,
		ef.lateEnv(), lateInstall.Seconds())
}

func (ef *execFleet) lateEnv() string { return "LATECHILD=" + filepath.Base(ef.dir) }

// A replace hook that installs in a child process and overruns its
// --hook-timeout: the agent undoes the step, records the failure and
// releases the slot, and by then nothing of the hook runs, so the node
// runs what its records say. On 6d7f554 only the hook's shell was killed:
// its child installed v2 after the undo, the record and the release.
func TestExecOverdueHooksChildDiesBeforeTheUndo(t *testing.T) {
	ef := newExecFleet(t, "overdue")
	ef.startHooks("n1", ef.slowChild(), "--hook-timeout=1s")
	v1 := ef.commit(ef.spec("v1", 1, "10s", nil))
	ef.waitFor(time.Minute, "v1 installed on n1", func() bool { return ef.converged([]string{"n1"}, v1) })
	v2 := ef.commit(ef.spec("v2", 1, "10s", map[string]string{"SLOWCHILD": "1"}))
	ef.waitFor(time.Minute, "n1's failure on v2 recorded and its slot released", func() bool {
		failures, _, holders := ef.kv(v2)
		return len(failures) == 1 && len(holders) == 0
	})
	released := time.Now()
	var began time.Time
	for _, r := range ef.hookRuns("n1") {
		if r.sha == v2 {
			began = r.begin
		}
	}
	if began.IsZero() {
		t.Fatal("n1's hook log has no run for v2")
	}
	t.Cleanup(func() { killWithEnv(t, ef.lateEnv()) })
	checkNoLateWrite(t, ef.lateEnv(), filepath.Join(ef.dir, "n1", "marker"), began, lateInstall)
	if !ef.installed("n1", v1) {
		t.Fatal("n1 does not run v1, which its records say it runs")
	}
	t.Logf("v2's hook began %s before the undone step's release was seen; nothing of it ran after", released.Sub(began).Round(10*time.Millisecond))
}

// An agent killed mid-hook, outside a unit that kills its hook with it,
// leaves the hook running; the agent that comes back kills what is left
// of that hook's group before it undoes the step, so the node runs what
// its records say. On 6d7f554 the hook's child installed v2 after the
// undo had put v1 back.
func TestExecHookOfAKilledAgentDiesBeforeTheUndo(t *testing.T) {
	ef := newExecFleet(t, "killed")
	ef.startHooks("n1", ef.slowChild())
	v1 := ef.commit(ef.spec("v1", 1, "10s", nil))
	ef.waitFor(time.Minute, "v1 installed on n1", func() bool { return ef.converged([]string{"n1"}, v1) })
	v2 := ef.commit(ef.spec("v2", 1, "10s", map[string]string{"SLOWCHILD": "1"}))
	var began time.Time
	ef.waitFor(time.Minute, "n1 in its v2 hook", func() bool {
		runs := ef.hookRuns("n1")
		last := runs[len(runs)-1]
		began = last.begin
		return last.sha == v2 && last.end.IsZero()
	})
	t.Cleanup(func() { killWithEnv(t, ef.lateEnv()) })
	p := ef.procs["n1"]
	ef.signal("n1", syscall.SIGKILL)
	<-p.done // SIGKILL: at once
	ef.startHooks("n1", "")
	ef.waitFor(time.Minute, "n1's undo: the hook run for v1 after v2's", func() bool {
		runs := ef.hookRuns("n1")
		return runs[len(runs)-1].sha == v1 && runs[len(runs)-1].begin.After(began)
	})
	checkNoLateWrite(t, ef.lateEnv(), filepath.Join(ef.dir, "n1", "marker"), began, lateInstall)
	ef.waitFor(time.Minute, "v2 installed on n1 afresh", func() bool { return ef.converged([]string{"n1"}, v2) })
	if failures, paused, _ := ef.kv(v2); len(failures) > 0 || paused {
		t.Fatalf("failures %q, paused %v: a step cut off with its agent is no failed release", failures, paused)
	}
}
