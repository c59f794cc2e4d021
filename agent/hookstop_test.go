package agent_test

import (
	"syscall"
	"testing"
	"time"
)

// descendants lists the processes started by pid, and theirs, from /proc.
func descendants(t *testing.T, pid int) []int {
	t.Helper()
	children := map[int][]int{}
	for _, p := range listProcs(t) {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// stopAs is how a stop signals a running agent, pid.
type stopAs func(t *testing.T, pid int)

// stopGroup sends SIGTERM to the agent's process group, as a kill of the
// group or a terminal's ^C (SIGINT) does.
func stopGroup(t *testing.T, pid int) {
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// stopUnit sends SIGTERM to every process of the agent's tree, as
// systemd's KillMode=control-group does to every process of the unit. The
// agent's own signal goes last: the hook may die before the agent knows.
func stopUnit(t *testing.T, pid int) {
	for _, p := range append(descendants(t, pid), pid) {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
}

// stopAgent sends SIGTERM to the agent alone, as KillMode=mixed does.
func stopAgent(t *testing.T, pid int) {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// An agent stopped while its replace hook runs, however the stop's signal
// reaches the hook, counts no failure and leaves its group unpaused: the
// step finishes, or the hook is cut off and the step undone, and the node
// is replaced afresh at its next turn (README, "Guarantees and limits").
// On 6d7f554 the hook shared the agent's process group, and a stop that
// signalled the hook too recorded a failed release and paused the group.
func TestStopMidHookCountsNoFailure(t *testing.T) {
	tests := []struct {
		name   string
		stop   stopAs
		cutOff bool // the stop's signal reaches the hook
	}{
		{"SIGTERM to the agent's process group", stopGroup, false},
		{"SIGTERM to every process of the unit (KillMode=control-group)", stopUnit, true},
		{"SIGTERM to the agent alone (KillMode=mixed)", stopAgent, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ef := newExecFleet(t, "stop")
			slow := `if grep -q SLOWHOOK "$ROLLAGENT_SPEC"; then sleep 3; fi`
			ef.startHooks("n1", slow)
			v1 := ef.commit(ef.spec("v1", 1, "10s", nil))
			ef.waitFor(time.Minute, "v1 installed on n1", func() bool { return ef.converged([]string{"n1"}, v1) })
			v2 := ef.commit(ef.spec("v2", 1, "10s", map[string]string{"SLOWHOOK": "1"}))
			ef.waitFor(time.Minute, "n1 in its v2 hook", func() bool {
				runs := ef.hookRuns("n1")
				last := runs[len(runs)-1]
				return last.sha == v2 && last.end.IsZero()
			})
			ef.mu.Lock()
			pid := ef.fleet.procs["n1"].Process.Pid
			ef.mu.Unlock()
			tc.stop(t, pid)
			select {
			case <-ef.procs["n1"].done:
			case <-time.After(time.Minute):
				t.Fatal("agent still running a minute after its stop")
			}
			if err := ef.procs["n1"].err; err != nil {
				t.Errorf("agent exited with %v after its stop, want status 0", err)
			}
			ef.checkStoppedClean(v1, v2, tc.cutOff)
			ef.startHooks("n1", slow)
			ef.waitFor(time.Minute, "v2 installed on n1 after the restart", func() bool { return ef.converged([]string{"n1"}, v2) })
			if failures, paused, _ := ef.kv(v2); len(failures) > 0 || paused {
				t.Fatalf("after the restart: failures %q, paused %v; want none", failures, paused)
			}
		})
	}
}

// checkStoppedClean checks, from Consul's KV and the node's own state,
// what an agent stopped mid-hook left: no failure, no pause, no slot, and
// the node on v2 if its step finished, or back on v1 if it was cut off.
func (ef *execFleet) checkStoppedClean(v1, v2 string, cutOff bool) {
	t := ef.t
	t.Helper()
	failures, paused, holders := ef.kv(v2)
	if len(failures) > 0 || paused {
		t.Fatalf("the stop recorded failures %q (paused %v): a step cut off by a stop is no failed release", failures, paused)
	}
	if len(holders) > 0 {
		t.Errorf("slot still held by %q after the agent's stop", holders)
	}
	want, outcome := v2, "finished"
	if cutOff {
		want, outcome = v1, "cut off and undone"
	}
	if !ef.installed("n1", want) {
		sha, pending := ef.execState("n1")
		t.Fatalf("n1's step was not %s: state sha=%.12s pending=%.12s", outcome, sha, pending)
	}
	t.Logf("the step was %s; no failure, no pause, slot free", outcome)
}
