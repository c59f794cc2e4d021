package agent_test

import (
	"bytes"
	"cmp"
	"context"
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
)

// lateChild is how long a test hook's child sleeps before it writes its
// marker: past every hook deadline these tests set.
const lateChild = 2 * time.Second

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
// marker does not appear until lateChild has passed since began: a child
// left running would write it then.
func checkNoLateWrite(t *testing.T, env, marker string, began time.Time) {
	t.Helper()
	if left := liveWithEnv(t, env); len(left) > 0 {
		t.Errorf("processes %v of the hook still run", left)
	}
	for deadline := began.Add(lateChild + 500*time.Millisecond); time.Now().Before(deadline); {
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
			checkNoLateWrite(t, env, marker, began)
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }
