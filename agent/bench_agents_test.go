package agent_test

// What the agent benchmarks (bench_failover, bench_cancel, bench_idle)
// share: real `rollagent run` processes with the exec runtime, their hook
// logs, and the Markdown report. Run them all at once:
//
//	go test -run '^$' -bench 'BenchmarkAgent(Failover|Cancel|Idle)' -benchtime 1x -timeout 30m ./agent/
//
// Each benchmark does its work once, whatever b.N is, so -benchtime 1x is
// the intended setting. Each prints a Markdown block; set AGENT_BENCH_MD to
// a file, such as BENCHMARKS.md, to have the block written there too,
// between markers of its own (internal/benchmd).

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/benchmd"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

const agentBenchMDEnv = "AGENT_BENCH_MD"

// benchAgents runs `rollagent run --runtime=exec` processes, each against
// the Consul HTTP address it is given. A node's replace hook appends
// "begin <unix ns> <sha>" to dir/<node>/hook.log, sleeps hookSleep (so that
// a holder can be killed in the middle of its step), installs and appends
// "end ...": a begin line is when that node started replacing, on this
// machine's clock. The health hook passes once the SHA it is asked about is
// the one installed.
type benchAgents struct {
	tb        testing.TB
	bin       string
	group     string
	dir, logs string
	store     *coordinator.Store
	hookSleep time.Duration
	logLevel  string
	mu        sync.Mutex
	procs     map[string]*benchProc
}

// benchProc is one agent process, in a process group of its own so that a
// kill takes its running hook with it, as a crash of the node would.
type benchProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func newBenchAgents(tb testing.TB, c *api.Client, group string, hookSleep time.Duration) *benchAgents {
	tb.Helper()
	ba := &benchAgents{tb: tb, bin: dockertest.BuildBinary(tb, "./cmd/rollagent"), group: fleettest.Group(group),
		dir: tb.TempDir(), logs: tb.TempDir(), store: coordinator.NewStore(c, ""), hookSleep: hookSleep,
		logLevel: "debug", procs: map[string]*benchProc{}}
	tb.Cleanup(ba.stopAll)
	return ba
}

func (ba *benchAgents) nodeDir(node string) string { return filepath.Join(ba.dir, node) }

// start starts node's agent against consulAddr and returns its process;
// extra are more flags for `run`.
func (ba *benchAgents) start(node, consulAddr string, extra ...string) *benchProc {
	ba.tb.Helper()
	d := ba.nodeDir(node)
	if err := os.MkdirAll(filepath.Join(d, "state"), 0o755); err != nil {
		ba.tb.Fatal(err)
	}
	q := "'" + d + "'"
	replace := fmt.Sprintf(`echo "begin $(date +%%s%%N) $ROLLAGENT_SHA" >>%[1]s/hook.log && sleep %.3[2]f &&
		echo "$ROLLAGENT_SHA" >%[1]s/installed && echo "end $(date +%%s%%N) $ROLLAGENT_SHA" >>%[1]s/hook.log`,
		q, ba.hookSleep.Seconds())
	health := fmt.Sprintf(`grep -qx "$ROLLAGENT_SHA" %s/installed`, q)
	logf, err := os.OpenFile(filepath.Join(ba.logs, node+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		ba.tb.Fatal(err)
	}
	cmd := exec.Command(ba.bin, "--consul-addr="+consulAddr, "--log-level="+ba.logLevel,
		"run", "--group="+ba.group, "--node="+node, "--runtime=exec", "--state-dir="+filepath.Join(d, "state"),
		"--replace-cmd=sh", "--replace-cmd=-c", "--replace-cmd="+replace,
		"--health-cmd=sh", "--health-cmd=-c", "--health-cmd="+health)
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		ba.tb.Fatal(err)
	}
	p := &benchProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	ba.mu.Lock()
	ba.procs[node] = p
	ba.mu.Unlock()
	return p
}

// kill SIGKILLs node's agent and its hooks, and waits for the agent to be
// gone.
func (ba *benchAgents) kill(node string) {
	ba.mu.Lock()
	p := ba.procs[node]
	delete(ba.procs, node)
	ba.mu.Unlock()
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		ba.tb.Errorf("agent %s still running 10s after SIGKILL", node)
	}
}

func (ba *benchAgents) stopAll() {
	ba.mu.Lock()
	var ns []string
	for n := range ba.procs {
		ns = append(ns, n)
	}
	ba.mu.Unlock()
	for _, n := range ns {
		ba.kill(n)
	}
	if !ba.tb.Failed() {
		return
	}
	if gs := ba.state(); gs != nil {
		ba.tb.Logf("group %s: desired %+v, holders %+v, problems %q", ba.group, gs.Desired, gs.Holders, gs.Problems)
		for _, n := range gs.Nodes {
			ba.tb.Logf("node %+v", n)
		}
	}
	for _, n := range ns {
		b, _ := os.ReadFile(filepath.Join(ba.logs, n+".log"))
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		ba.tb.Logf("agent %s log tail:\n%s", n, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

// commit makes release the desired spec at max_parallel parallel.
func (ba *benchAgents) commit(release string, parallel int) string {
	ba.tb.Helper()
	js := fmt.Sprintf(`{"name":%q,"container":{"image":"example.com/app:%s"},"update":{"max_parallel":%d,
		"min_healthy_time":"1s","healthy_deadline":"30s","failure_action":"pause","max_failures":1}}`,
		ba.group, release, parallel)
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "bench spec")
	if err != nil {
		ba.tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := ba.store.Commit(ctx, ba.group, s, "bench", "bench "+release)
	if err != nil {
		ba.tb.Fatal(err)
	}
	return res.SHA
}

// state reads the group, or returns nil when Consul does not answer.
func (ba *benchAgents) state() *coordinator.GroupState {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := ba.store.Read(ctx, ba.group, nil)
	if err != nil {
		return nil
	}
	return gs
}

// converged says every node in ns reports sha converged.
func (ba *benchAgents) converged(ns []string, sha string) bool {
	gs := ba.state()
	if gs == nil {
		return false
	}
	done := 0
	for _, n := range gs.Nodes {
		if slices.Contains(ns, n.Node) && n.SHA == sha && n.State == coordinator.StateConverged {
			done++
		}
	}
	return done == len(ns)
}

// hookBegin is one begin line of a node's hook log.
type hookBegin struct {
	node, sha string
	at        time.Time
}

// begins lists the begin lines of node's hook log, in order.
func (ba *benchAgents) begins(node string) []hookBegin {
	fh, err := os.Open(filepath.Join(ba.nodeDir(node), "hook.log"))
	if err != nil {
		return nil
	}
	defer fh.Close()
	var out []hookBegin
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "begin" {
			continue
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			ba.tb.Fatalf("%s hook.log: bad line %q", node, sc.Text())
		}
		out = append(out, hookBegin{node: node, sha: f[2], at: time.Unix(0, ns)})
	}
	return out
}

// beginsOf lists every node's begins of sha, earliest first.
func (ba *benchAgents) beginsOf(ns []string, sha string) []hookBegin {
	var out []hookBegin
	for _, n := range ns {
		for _, hb := range ba.begins(n) {
			if hb.sha == sha {
				out = append(out, hb)
			}
		}
	}
	slices.SortFunc(out, func(a, b hookBegin) int { return a.at.Compare(b.at) })
	return out
}

// benchPoll polls cond every 10ms for at most d; it is what times events
// that have no timestamp of their own, so it polls finely.
func benchPoll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// durStats are the nearest-rank median, min and max of ds.
func durStats(ds []time.Duration) (med, lo, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)+1)/2-1], s[0], s[len(s)-1]
}

// benchHeader says how and where a block was generated.
func benchHeader(bench string) string {
	cmd := fmt.Sprintf("go test -run '^$' -bench '%s' -benchtime 1x -timeout 30m ./agent/", bench)
	if p := os.Getenv(agentBenchMDEnv); p != "" {
		// Only the file's name: the report is committed, this machine's
		// paths are not.
		cmd = agentBenchMDEnv + "=$PWD/" + filepath.Base(p) + " " + cmd
	}
	return fmt.Sprintf("Generated by `%s` on %s.\nConsul %s, %s, %s/%s, %d CPUs.\n\n", cmd,
		time.Now().UTC().Format("2006-01-02 15:04 MST"), consultest.Version, runtime.Version(),
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
}

// publishBench prints md and, with AGENT_BENCH_MD set, writes it into that
// file as the block named "agent bench <name>".
func publishBench(b *testing.B, name, md string) {
	// Printed, not logged: a parent benchmark's log shows only under -v.
	fmt.Println("\n" + md)
	if p := os.Getenv(agentBenchMDEnv); p != "" {
		if err := benchmd.Write(p, "agent bench "+name, md); err != nil {
			b.Errorf("%s: %v", p, err)
		}
	}
}

// holds says whether node holds a slot by the KV records: its contender key,
// locked by its session, is there and the holders record names it. An
// unreadable group counts as held.
func (ba *benchAgents) holds(node string) bool {
	gs := ba.state()
	if gs == nil || gs.Holders == nil {
		return gs == nil
	}
	for _, e := range gs.Holders.Holding {
		if e.Name == node {
			return true
		}
	}
	return false
}
