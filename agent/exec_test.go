package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// proc is an agent process started by startArgs: done closes once it has
// exited, and err, readable after done, is what Wait returned.
type proc struct {
	done chan struct{}
	err  error
}

// startArgs starts `rollagent run` for node against the fleet's Consul with
// extra run flags. Like start, it registers the process for signal and
// stopAll; unlike start, it says when the process exits.
func (f *fleet) startArgs(node string, extra ...string) *proc {
	f.t.Helper()
	logf, err := os.OpenFile(filepath.Join(f.logs, node+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	args := append([]string{"--consul-addr=" + f.srv.HTTPAddr, "--log-level=debug", "run",
		"--group=" + f.group, "--node=" + node}, extra...)
	cmd := exec.Command(f.bin, args...)
	cmd.Env = append(os.Environ(), f.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own, which a test may signal whole as a
	// terminal or a process-group kill would, without the test's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		f.t.Fatal(err)
	}
	p := &proc{done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.done) }()
	f.mu.Lock()
	f.procs[node] = cmd
	f.mu.Unlock()
	return p
}

// execFleet runs agents with the exec runtime: no Docker. Each node's hooks
// work in dir/<node>: installed.json is the spec the replace hook installed,
// hook.log has a "begin <unix ns> <sha>" and an "end ..." line per run.
type execFleet struct {
	*fleet
	dir   string
	procs map[string]*proc
}

func newExecFleet(t *testing.T, group string) *execFleet {
	t.Helper()
	ef := newInProcExecFleet(t, group)
	ef.bin = dockertest.BuildBinary(t, "./cmd/rollagent")
	return ef
}

// newInProcExecFleet is an execFleet without the agent binary, for agents
// run in this process on runtime's Exec (wrapped by the test, say).
func newInProcExecFleet(t *testing.T, group string) *execFleet {
	t.Helper()
	srv := consultest.NewDev(t)
	f := &fleet{t: t, srv: srv, store: coordinator.NewStore(srv.Client(), ""), group: fleettest.Group(group), logs: t.TempDir(),
		procs: map[string]*exec.Cmd{}}
	t.Cleanup(f.stopAll)
	ef := &execFleet{fleet: f, dir: t.TempDir(), procs: map[string]*proc{}}
	t.Cleanup(ef.stopGracefully)
	return ef
}

// hooks are the replace and health scripts of every node, for sh -c. The
// replace hook runs before (a sleep, say) between its begin and end lines,
// when it is not "".
func (ef *execFleet) hooks(before string) (replace, health string) {
	d := "'" + ef.dir + "'/\"$ROLLAGENT_NODE\""
	if before != "" {
		before += " &&"
	}
	replace = fmt.Sprintf(`d=%s; mkdir -p "$d" && echo "begin $(date +%%s%%N) $ROLLAGENT_SHA" >>"$d/hook.log" && %s
		cp "$ROLLAGENT_SPEC" "$d/installed.json" && echo "end $(date +%%s%%N) $ROLLAGENT_SHA" >>"$d/hook.log"`, d, before)
	health = fmt.Sprintf(`f=%s/installed.json; test -f "$f" && ! grep -q BADRELEASE "$f"`, d)
	return replace, health
}

// runtime is the exec runtime of node as start's agents run it, for an
// agent in this process; before is as for hooks.
func (ef *execFleet) runtime(node, before string) *agent.Exec {
	ef.t.Helper()
	if err := os.MkdirAll(ef.stateDir(node), 0o700); err != nil {
		ef.t.Fatal(err)
	}
	replace, health := ef.hooks(before)
	return &agent.Exec{ReplaceCmd: []string{"sh", "-c", replace}, HealthCmd: []string{"sh", "-c", health},
		StateDir: ef.stateDir(node), Group: ef.group, Node: node, Log: hclog.NewNullLogger()}
}

func (ef *execFleet) start(node string) {
	ef.t.Helper()
	replace, health := ef.hooks("")
	ef.procs[node] = ef.startArgs(node, "--runtime=exec", "--state-dir="+ef.stateDir(node),
		"--replace-cmd=sh", "--replace-cmd=-c", "--replace-cmd="+replace,
		"--health-cmd=sh", "--health-cmd=-c", "--health-cmd="+health)
}

// stopGracefully SIGTERMs every agent and waits for it, so that no hook
// still writes into the temp dirs when they are removed; stopAll, which runs
// next, SIGKILLs any left and prints logs if the test failed.
func (ef *execFleet) stopGracefully() {
	ef.mu.Lock()
	for n := range ef.procs {
		if cmd := ef.fleet.procs[n]; cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	ef.mu.Unlock()
	for n, p := range ef.procs {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			ef.t.Errorf("agent %s still running 30s after SIGTERM", n)
		}
	}
}

func (ef *execFleet) stateDir(node string) string { return filepath.Join(ef.dir, node, "state") }

// spec is an exec spec; the image is only data to the exec runtime.
func (ef *execFleet) spec(release string, parallel int, deadline string, env map[string]string) *hashspec.Spec {
	ef.t.Helper()
	envJSON, _ := json.Marshal(env)
	js := fmt.Sprintf(`{"name":%q,"container":{"image":"example.com/app:%s","env":%s},"update":{"max_parallel":%d,
		"min_healthy_time":"1s","healthy_deadline":%q,"failure_action":"pause","max_failures":1}}`,
		ef.group, release, envJSON, parallel, deadline)
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "exec spec")
	if err != nil {
		ef.t.Fatal(err)
	}
	return s
}

// execState reads the runtime's state file of node.
func (ef *execFleet) execState(node string) (sha, pending string) {
	b, err := os.ReadFile(filepath.Join(ef.stateDir(node), ef.group+"-"+node+".json"))
	if err != nil {
		return "", ""
	}
	var st struct{ SHA, Pending string }
	if err := json.Unmarshal(b, &st); err != nil {
		ef.t.Fatalf("state file of %s: %v", node, err)
	}
	return st.SHA, st.Pending
}

// installed says node has sha installed: in its state file, with nothing
// pending, and as the spec file its hook copied.
func (ef *execFleet) installed(node, sha string) bool {
	got, pending := ef.execState(node)
	return got == sha && pending == "" && ef.hookInstalled(node, sha)
}

// hookInstalled says the spec file that node's hook copied last is sha's,
// whatever the state file says.
func (ef *execFleet) hookInstalled(node, sha string) bool {
	want, err := os.ReadFile(filepath.Join(ef.stateDir(node), "specs", sha+".json"))
	if err != nil {
		return false
	}
	have, err := os.ReadFile(filepath.Join(ef.dir, node, "installed.json"))
	return err == nil && string(have) == string(want)
}

// converged says every node has sha installed and reports it converged.
func (ef *execFleet) converged(ns []string, sha string) bool {
	for _, n := range ns {
		if !ef.installed(n, sha) {
			return false
		}
	}
	done := 0
	for _, n := range ef.state().Nodes {
		if n.SHA == sha && n.State == coordinator.StateConverged {
			done++
		}
	}
	return done == len(ns)
}

type hookRun struct {
	node, sha  string
	begin, end time.Time
}

// hookRuns parses node's hook log, in order.
func (ef *execFleet) hookRuns(node string) []hookRun {
	ef.t.Helper()
	fh, err := os.Open(filepath.Join(ef.dir, node, "hook.log"))
	if err != nil {
		ef.t.Fatal(err)
	}
	defer fh.Close()
	var runs []hookRun
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			ef.t.Fatalf("%s hook.log: bad line %q", node, sc.Text())
		}
		ns, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			ef.t.Fatalf("%s hook.log: bad line %q: %v", node, sc.Text(), err)
		}
		at := time.Unix(0, ns)
		if fields[0] == "begin" {
			runs = append(runs, hookRun{node: node, sha: fields[2], begin: at})
		} else if len(runs) > 0 && fields[0] == "end" {
			runs[len(runs)-1].end = at
		}
	}
	return runs
}

// checkOneAtATime checks, from the hook logs, that each node ran the hook
// for sha once and that each run began only after the previous node's run
// had ended and its workload had then been healthy for minHealthy: at
// max_parallel=1 the slot is held from the hook until min_healthy_time.
func (ef *execFleet) checkOneAtATime(ns []string, sha string, minHealthy time.Duration) {
	ef.t.Helper()
	var runs []hookRun
	for _, n := range ns {
		var mine []hookRun
		for _, r := range ef.hookRuns(n) {
			if r.sha == sha {
				mine = append(mine, r)
			}
		}
		if len(mine) != 1 || mine[0].end.IsZero() {
			ef.t.Fatalf("node %s ran the hook for %.12s %d times (%+v), want one complete run", n, sha, len(mine), mine)
		}
		runs = append(runs, mine[0])
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].begin.Before(runs[j].begin) })
	for i := 1; i < len(runs); i++ {
		prev, cur := runs[i-1], runs[i]
		if gap := cur.begin.Sub(prev.end); gap < minHealthy-10*time.Millisecond {
			ef.t.Fatalf("%s began %s after %s's hook ended, want at least min_healthy_time %s: two nodes were mid-replacement at once",
				cur.node, gap, prev.node, minHealthy)
		}
	}
	ef.t.Logf("hook runs for %.12s: %s at +0, %s at +%s, %s at +%s", sha, runs[0].node,
		runs[1].node, runs[1].begin.Sub(runs[0].begin).Round(time.Millisecond),
		runs[2].node, runs[2].begin.Sub(runs[0].begin).Round(time.Millisecond))
}

// busySampler counts, from KV every 50ms, the nodes in the middle of a
// replacement (replacing or verifying) and keeps the most it saw.
type busySampler struct{ *testkit.Peak }

func (f *fleet) sampleBusy() busySampler {
	return busySampler{testkit.StartPeak(50*time.Millisecond, func() (int, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gs, err := f.store.Read(ctx, f.group, nil)
		if err != nil {
			return 0, false
		}
		busy := 0
		for _, n := range gs.Nodes {
			if n.State == coordinator.StateReplacing || n.State == coordinator.StateVerifying {
				busy++
			}
		}
		return busy, true
	})}
}

func (s busySampler) finish(t *testing.T, k int) {
	t.Helper()
	maxBusy, samples := s.Stop()
	t.Logf("KV monitor: %d samples, at most %d nodes mid-replacement (K=%d)", samples, maxBusy, k)
	if samples == 0 || maxBusy > k {
		t.Fatalf("%d nodes were mid-replacement at once in %d samples, K=%d", maxBusy, samples, k)
	}
}

// TestExecRuntime rolls three exec-runtime agents through a first install,
// an upgrade at max_parallel=1 and a bad release that pauses, with real
// Consul and real processes but no Docker.
func TestExecRuntime(t *testing.T) {
	ef := newExecFleet(t, "batch")
	ns := nodes(3)
	for _, n := range ns {
		ef.start(n)
	}
	v1 := ef.commit(ef.spec("v1", 3, "10s", nil))
	ef.waitFor(60*time.Second, "v1 installed on every node", func() bool { return ef.converged(ns, v1) })

	mon := ef.sampleBusy()
	start := time.Now()
	v2 := ef.commit(ef.spec("v2", 1, "10s", nil))
	ef.waitFor(60*time.Second, "v2 installed on every node", func() bool { return ef.converged(ns, v2) })
	t.Logf("exec rollout of 3 nodes at K=1 took %s", time.Since(start).Round(100*time.Millisecond))
	mon.finish(t, 1)
	ef.checkOneAtATime(ns, v2, time.Second)
	checkService(t, ef.fleet, ns, v2)

	ef.badReleasePauses(ns, v2)
}

// badReleasePauses commits a release the health hook fails and checks that
// it pauses after one failure, and that the failed node reinstalled prev.
func (ef *execFleet) badReleasePauses(ns []string, prev string) {
	t := ef.t
	t.Helper()
	bad := ef.commit(ef.spec("bad", 1, "3s", map[string]string{"BADRELEASE": "1"}))
	ef.waitFor(60*time.Second, "the pause", func() bool {
		gs := ef.state()
		return gs.Pause != nil && gs.Desired.SHA == bad && gs.Holders != nil && len(gs.Holders.Holding) == 0
	})
	ef.waitFor(30*time.Second, "every node paused on the previous release", func() bool {
		paused := 0
		for _, n := range ef.state().Nodes {
			if n.SHA == prev && n.State == coordinator.StatePaused {
				paused++
			}
		}
		return paused == len(ns)
	})
	gs := ef.state()
	if len(gs.Failures) != 1 {
		t.Fatalf("%d failures recorded, want exactly 1 (max_failures=1): %+v", len(gs.Failures), gs.Failures)
	}
	failed := gs.Failures[0].Node
	for _, n := range ns {
		if !ef.installed(n, prev) {
			sha, pending := ef.execState(n)
			t.Errorf("node %s: state file sha=%.12s pending=%.12s, want %.12s installed", n, sha, pending, prev)
		}
		var shas []string
		for _, r := range ef.hookRuns(n) {
			shas = append(shas, r.sha)
		}
		switch last := shas[max(0, len(shas)-2):]; {
		case n == failed && (len(last) != 2 || last[0] != bad || last[1] != prev):
			t.Errorf("failed node %s: hook runs end with %.12q, want the bad release then a reinstall of %.12s", n, last, prev)
		case n != failed && slices.Contains(shas, bad):
			t.Errorf("node %s ran the hook for the bad release, want only the failed node to have tried it", n)
		}
	}
	t.Logf("bad release failed on %s, reinstalled %.12s; %s", failed, prev, gs.Failures[0].Error)
}

// A replace hook typically starts the workload in the background; the
// workload then holds the hook's stdout and stderr. The hook's run must end
// when the hook does, not when the workload does, and a failing hook's
// output must still be reported.
func TestExecHookOutput(t *testing.T) {
	tests := []struct {
		name, script, wantErr string
	}{
		{"hook leaving a background process", `sleep 60 & echo $! >"$PIDFILE"; echo started`, ""},
		{"failing hook", `echo "cannot install $ROLLAGENT_SHA" >&2; exit 3`, "exit status 3: cannot install "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "bg.pid")
			t.Setenv("PIDFILE", pidFile)
			t.Cleanup(func() { killPIDFile(t, pidFile) })
			e := &agent.Exec{ReplaceCmd: []string{"sh", "-c", tt.script}, HealthCmd: []string{"true"},
				StateDir: dir, Group: "g", Node: "n1", Log: hclog.NewNullLogger(), PassEnv: []string{"PIDFILE"}}
			spec, sha, err := hashspec.Load([]byte(`{"container":{"image":"example.com/app:1"}}`), hashspec.FormatJSON, "spec")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.Prepare(ctx, spec, sha); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- e.Replace(ctx, spec, sha, func(context.Context, string) error { return nil }) }()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Replace still running 10s after its hook exited: it waits for a process the hook left behind")
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Replace = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.HasSuffix(err.Error(), tt.wantErr+sha)):
				// The output's last newline is no part of the error.
				t.Fatalf("Replace = %q, want an error ending in %q and the hook's output", err, tt.wantErr)
			}
		})
	}
}

// killPIDFile kills the one process whose ID a test hook wrote, if any.
func killPIDFile(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Errorf("pid file %s: %q", path, b)
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
