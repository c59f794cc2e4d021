// Package agentbench is the harness of the agent benchmarks that run real
// `rollagent run` processes with the exec runtime (BenchmarkAgentFailover,
// BenchmarkAgentCancel, BenchmarkAgentIdle): the processes, their hook
// logs, the measurements and the Markdown report.
//
// Each benchmark does its work once, whatever b.N is, so -benchtime 1x is
// the intended setting. Each prints a Markdown block; set AGENT_BENCH_MD to
// a file, such as BENCHMARKS.md, to have the block written there too,
// between markers of its own (benchkit.Report).
package agentbench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// agents runs `rollagent run --runtime=exec` processes, each against the
// Consul HTTP address it is given. A node's replace hook appends "begin
// <unix ns> <sha>" to dir/<node>/hook.log, sleeps hookSleep (so that a
// holder can be killed in the middle of its step), installs and appends
// "end ...": a begin line is when that node started replacing, on this
// machine's clock. The health hook passes once the SHA it is asked about is
// the one installed.
type agents struct {
	tb        testing.TB
	bin       string
	group     string
	dir, logs string
	store     *coordinator.Store
	hookSleep time.Duration
	logLevel  string
	mu        sync.Mutex
	procs     map[string]*proc
}

// proc is one agent process, in a process group of its own so that a kill
// takes its running hook with it, as a crash of the node would.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func newAgents(tb testing.TB, c *api.Client, group string, hookSleep time.Duration) *agents {
	tb.Helper()
	ba := &agents{tb: tb, bin: dockertest.BuildBinary(tb, "./cmd/rollagent"), group: fleettest.Group(group),
		dir: tb.TempDir(), logs: tb.TempDir(), store: coordinator.NewStore(c, ""), hookSleep: hookSleep,
		logLevel: "debug", procs: map[string]*proc{}}
	tb.Cleanup(ba.stopAll)
	return ba
}

func (ba *agents) nodeDir(node string) string { return filepath.Join(ba.dir, node) }

// start starts node's agent against consulAddr and returns its process;
// extra are more flags for `run`.
func (ba *agents) start(node, consulAddr string, extra ...string) *proc {
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
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	ba.mu.Lock()
	ba.procs[node] = p
	ba.mu.Unlock()
	return p
}

// kill SIGKILLs node's agent and its hooks, and waits for the agent to be
// gone.
func (ba *agents) kill(node string) {
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

func (ba *agents) stopAll() {
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
func (ba *agents) commit(release string, parallel int) string {
	ba.tb.Helper()
	update := fmt.Sprintf(`{"max_parallel":%d,"min_healthy_time":"1s","healthy_deadline":"30s","failure_action":"pause","max_failures":1}`, parallel)
	return Commit(ba.tb, ba.store, ba.group, "example.com/app:"+release, update)
}

// Commit commits a spec of group that runs image, with update as its
// update block (JSON; none when empty), and returns its SHA.
func Commit(tb testing.TB, st *coordinator.Store, group, image, update string) string {
	tb.Helper()
	js := fmt.Sprintf(`{"name":%q,"container":{"image":%q}`, group, image)
	if update != "" {
		js += `,"update":` + update
	}
	s, _, err := hashspec.Load([]byte(js+"}"), hashspec.FormatJSON, "bench spec")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := st.Commit(ctx, group, s, "bench", "bench "+image)
	if err != nil {
		tb.Fatal(err)
	}
	return res.SHA
}

// state reads the group, or returns nil when Consul does not answer.
func (ba *agents) state() *coordinator.GroupState {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := ba.store.Read(ctx, ba.group, nil)
	if err != nil {
		return nil
	}
	return gs
}

// converged says every node in ns reports sha converged.
func (ba *agents) converged(ns []string, sha string) bool {
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

// holds says whether node holds a slot by the KV records: its contender key,
// locked by its session, is there and the holders record names it. An
// unreadable group counts as held.
func (ba *agents) holds(node string) bool {
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

func (ba *agents) keys() coordinator.Keys {
	k, err := ba.store.Keys(ba.group)
	if err != nil {
		ba.tb.Fatal(err)
	}
	return k
}

// hookBegin is one begin line of a node's hook log.
type hookBegin struct {
	node, sha string
	at        time.Time
}

// begins lists the begin lines of node's hook log, in order.
func (ba *agents) begins(node string) []hookBegin {
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
func (ba *agents) beginsOf(ns []string, sha string) []hookBegin {
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

// nodes names n nodes n1..n<n>.
func nodes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%d", i+1)
	}
	return out
}
