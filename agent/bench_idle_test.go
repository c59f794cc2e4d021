package agent_test

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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

	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

const (
	// idleWindow is how long the idle processes are observed.
	idleWindow = 60 * time.Second
	// idleSettle lets the converged agent's last service update land
	// before the window opens.
	idleSettle = 5 * time.Second
	// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on
	// every Linux platform Go supports.
	clockTick = 10 * time.Millisecond
)

// idleProc is one observed process: max RSS over 1 s samples and CPU time
// over the window.
type idleProc struct {
	name    string
	pid     int
	maxRSS  int64         // kB
	cpu     time.Duration // utime + stime, in clock ticks
	onCPU   time.Duration // its threads' time on a CPU, in ns (schedstat)
	childCP time.Duration // CPU of reaped children (the agent's health hooks)
}

// idleAgent is one observed agent and the proxy that counts its requests.
type idleAgent struct {
	mode string // how its workload check runs
	proc *idleProc
	px   *countingProxy
	reqs map[string]int // started in the window
	end  map[string]int // in flight at its end
}

// BenchmarkAgentIdle observes, over idleWindow, two converged `rollagent
// run` processes (exec runtime) side by side, one that serves its health
// on loopback for Consul to check (the default, --health-addr=auto, as it
// reaches Consul over loopback) and one whose workload check is a TTL check
// it passes (--health-addr=off); each talks to the node's Consul client
// agent through a counting reverse proxy of its own. Two baselines run in
// the same window: that Consul client agent, and an idle minimal Go HTTP
// server (demoapp).
func BenchmarkAgentIdle(b *testing.B) {
	srv := consultest.NewDev(b)
	client := consultest.NewClients(b, srv, 1, "")[0]
	ba := newBenchAgents(b, srv.Client(), "idle", 0)
	ba.logLevel = "info" // as deployed: debug lines would cost CPU the window measures
	agents := []*idleAgent{{mode: "HTTP check on loopback (default)"}, {mode: "TTL check (--health-addr=off)"}}
	for i, a := range agents {
		a.px = newCountingProxy(b, client.HTTPAddr)
		node := fmt.Sprintf("n%d", i+1)
		var extra []string
		if i == 1 {
			extra = []string{"--health-addr=off"}
		}
		p := ba.start(node, a.px.addr, extra...)
		a.proc = &idleProc{name: "rollagent run, converged, exec runtime, " + a.mode, pid: p.cmd.Process.Pid}
	}
	v1 := ba.commit("v1", 1)
	fleettest.WaitFor(b, time.Minute, "the agents to converge", func() bool { return ba.converged([]string{"n1", "n2"}, v1) })
	app := startDemoapp(b)
	time.Sleep(idleSettle) // an observation window opens, nothing to wait for
	procs := []*idleProc{agents[0].proc, agents[1].proc, {name: "consul client agent (baseline)", pid: client.PID()},
		{name: "demoapp: idle Go HTTP server (baseline)", pid: app.Process.Pid}}
	observeIdle(b, procs, agents)
	consul, demo := procs[2], procs[3]
	perMin := func(n int) float64 { return float64(n) / idleWindow.Minutes() }
	b.ReportMetric(0, "ns/op")
	for i, a := range agents {
		blocking, other := splitBlocking(a.reqs)
		sfx := []string{"ttl", "http"}[i]
		b.ReportMetric(float64(a.proc.maxRSS)/1024, "rss-MB-"+sfx)
		b.ReportMetric(cpuPercent(a.proc.onCPU), "cpu-%-"+sfx)
		b.ReportMetric(perMin(blocking), "blocking-req/min-"+sfx)
		b.ReportMetric(perMin(other), "other-req/min-"+sfx)
	}
	b.ReportMetric(float64(agents[0].proc.maxRSS)/float64(consul.maxRSS), "rss-vs-consul")
	b.ReportMetric(float64(agents[0].proc.maxRSS)/float64(demo.maxRSS), "rss-vs-demoapp")
	publishBench(b, "idle", idleMarkdown(procs, agents))
}

// observeIdle samples procs every second over idleWindow, and records in
// each agent the requests its proxy saw start in the window, and those in
// flight at its end, by class.
func observeIdle(b *testing.B, procs []*idleProc, agents []*idleAgent) {
	b.Helper()
	start := make([]procStat, len(procs))
	for i, p := range procs {
		st, err := readProcStat(p.pid)
		if err != nil {
			b.Fatal(err)
		}
		start[i] = st
	}
	before := make([]map[string]int, len(agents))
	for i, a := range agents {
		before[i], _ = a.px.counts()
	}
	end := time.Now().Add(idleWindow)
	for time.Now().Before(end) {
		for _, p := range procs {
			st, err := readProcStat(p.pid)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			p.maxRSS = max(p.maxRSS, st.rssKB)
		}
		time.Sleep(min(time.Second, time.Until(end)))
	}
	for i, a := range agents {
		var after map[string]int
		after, a.end = a.px.counts()
		a.reqs = map[string]int{}
		for k, n := range after {
			if d := n - before[i][k]; d > 0 {
				a.reqs[k] = d
			}
		}
	}
	for i, p := range procs {
		st, err := readProcStat(p.pid)
		if err != nil {
			b.Fatal(err)
		}
		p.cpu, p.onCPU, p.childCP = st.cpu-start[i].cpu, st.onCPU-start[i].onCPU, st.children-start[i].children
	}
}

// splitBlocking sums requests by whether they were blocking queries.
func splitBlocking(reqs map[string]int) (blocking, other int) {
	for k, n := range reqs {
		if strings.HasSuffix(k, "(blocking)") {
			blocking += n
		} else {
			other += n
		}
	}
	return blocking, other
}

func cpuPercent(d time.Duration) float64 { return 100 * d.Seconds() / idleWindow.Seconds() }

func idleMarkdown(procs []*idleProc, agents []*idleAgent) string {
	var sb strings.Builder
	sb.WriteString(benchHeader("BenchmarkAgentIdle"))
	fmt.Fprintf(&sb, "Two converged `rollagent run` processes (exec runtime) observed side by side for %s, each talking to "+
		"the node's Consul client agent through a counting loopback reverse proxy of its own: one serves its workload's "+
		"health on a loopback port for Consul to check over HTTP (the default, `--health-addr=auto`, as Consul is reached over "+
		"loopback), the other passes its workload's TTL check itself (`--health-addr=off`). "+
		"RSS is the max of 1 s samples of VmRSS, CPU is utime+stime over the window (/proc, in 10 ms ticks) and, finer, the "+
		"threads' time on a CPU (/proc/<pid>/task/*/schedstat), from which the percentage is. Targets: < 20 MB RSS, < 0.5%% "+
		"of a core, only blocking-query renewals.\n\n", idleWindow)
	first := procs[0]
	sb.WriteString("| Process | Max RSS (MB) | utime+stime (s) | On CPU (ms) | CPU (% of a core) | health hooks' CPU (s) | RSS: first agent ÷ this | CPU: first agent ÷ this |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range procs {
		fmt.Fprintf(&sb, "| %s | %.1f | %.2f | %.1f | %.4f | %.3f | %s | %s |\n", p.name, float64(p.maxRSS)/1024, p.cpu.Seconds(),
			millis(p.onCPU), cpuPercent(p.onCPU), p.childCP.Seconds(), idleRatio(float64(first.maxRSS), float64(p.maxRSS)),
			idleRatio(first.onCPU.Seconds(), p.onCPU.Seconds()))
	}
	sb.WriteString("\nHealth hooks' CPU is that of the reaped children, on top of the process's own.\n\n")
	idleRequests(&sb, agents)
	return sb.String()
}

// idleRequests writes the table of each agent's Consul requests by class.
func idleRequests(sb *strings.Builder, agents []*idleAgent) {
	keys := map[string]bool{}
	sb.WriteString("| Consul HTTP request (agent → its Consul client)")
	for _, a := range agents {
		fmt.Fprintf(sb, " | %s: started per minute | in flight at the end", a.mode)
		for k := range a.reqs {
			keys[k] = true
		}
		for k := range a.end {
			keys[k] = true
		}
	}
	sb.WriteString(" |\n|---" + strings.Repeat("|---:|---:", len(agents)) + "|\n")
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		fmt.Fprintf(sb, "| `%s`", k)
		for _, a := range agents {
			fmt.Fprintf(sb, " | %.1f | %d", float64(a.reqs[k])/idleWindow.Minutes(), a.end[k])
		}
		sb.WriteString(" |\n")
	}
	if len(keys) == 0 {
		sb.WriteString("| (none)" + strings.Repeat(" | 0 | 0", len(agents)) + " |\n")
	}
	sb.WriteString("\n")
	for _, a := range agents {
		blocking, other := splitBlocking(a.reqs)
		fmt.Fprintf(sb, "- %s: blocking queries started %.1f/min, other requests %.1f/min.\n", a.mode,
			float64(blocking)/idleWindow.Minutes(), float64(other)/idleWindow.Minutes())
	}
	sb.WriteString("\nThe agent's blocking query on `desired` waits up to its 5 min resync. `PUT /v1/agent/check/update/…` is " +
		"the TTL check of the `rollagent-<group>` service, passed every 10 s from the workload's health and answered by " +
		"the local client agent, with `--health-addr=off`; by default that client agent asks the rollagent agent every 10 s " +
		"instead, so the agent sends Consul nothing but its blocking query.\n")
}

// ratio formats a/b as "agent is N× this", or "–" when either is zero.
func idleRatio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// procStat is what /proc says of one process.
type procStat struct {
	rssKB    int64
	cpu      time.Duration // utime + stime
	onCPU    time.Duration // sum of the live threads' schedstat run time
	children time.Duration // cutime + cstime
}

func readProcStat(pid int) (procStat, error) {
	var ps procStat
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			ps.rssKB, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, err
	}
	// Fields after the command name, which is in parentheses and may
	// contain spaces: state is field 3, utime..cstime are 14..17.
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return ps, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i-3], 10, 64)
		return time.Duration(n) * clockTick
	}
	ps.cpu, ps.children = tick(14)+tick(15), tick(16)+tick(17)
	ps.onCPU, err = onCPU(pid)
	return ps, err
}

// onCPU sums the first field of each thread's schedstat: nanoseconds spent
// on a CPU, far finer than utime and stime. A thread that exited is missed,
// which Go's long-lived threads make rare.
func onCPU(pid int) (time.Duration, error) {
	paths, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(paths) == 0 {
		return 0, fmt.Errorf("schedstat of %d: %v", pid, err)
	}
	var sum time.Duration
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += time.Duration(n)
		}
	}
	return sum, nil
}

// countingProxy is a loopback reverse proxy to a Consul agent that counts
// requests by method, path class and whether they block (an index=
// parameter other than 0).
type countingProxy struct {
	addr     string
	mu       sync.Mutex
	n        map[string]int // started
	inFlight map[string]int
}

func newCountingProxy(tb testing.TB, target string) *countingProxy {
	tb.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		tb.Fatal(err)
	}
	px := &countingProxy{n: map[string]int{}, inFlight: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	// A request the agent gives up on (it is killed at the end) is no
	// error worth a log line.
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := ""
		if idx := r.URL.Query().Get("index"); idx != "" && idx != "0" {
			kind = " (blocking)"
		}
		class := r.Method + " " + pathClass(r.URL.Path) + kind
		px.mu.Lock()
		px.n[class]++
		px.inFlight[class]++
		px.mu.Unlock()
		rp.ServeHTTP(w, r)
		px.mu.Lock()
		px.inFlight[class]--
		px.mu.Unlock()
	}))
	tb.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	px.addr = hs.Listener.Addr().String()
	return px
}

// counts returns the requests started so far, and those in flight now.
func (px *countingProxy) counts() (started, inFlight map[string]int) {
	px.mu.Lock()
	defer px.mu.Unlock()
	started, inFlight = map[string]int{}, map[string]int{}
	for k, v := range px.n {
		started[k] = v
	}
	for k, v := range px.inFlight {
		if v > 0 {
			inFlight[k] = v
		}
	}
	return started, inFlight
}

// pathClass drops the key or ID at the end of a Consul API path.
func pathClass(p string) string {
	for _, prefix := range []string{"/v1/kv/", "/v1/agent/check/update/", "/v1/agent/check/pass/",
		"/v1/agent/check/deregister/", "/v1/agent/service/deregister/", "/v1/session/renew/",
		"/v1/session/destroy/", "/v1/session/info/"} {
		if strings.HasPrefix(p, prefix) {
			return prefix + "…"
		}
	}
	return p
}

// startDemoapp runs an idle demoapp on a free loopback port, until the
// benchmark ends.
func startDemoapp(tb testing.TB) *exec.Cmd {
	tb.Helper()
	bin := dockertest.BuildBinary(tb, "./internal/demoapp")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "PORT="+port)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	fleettest.WaitFor(tb, 10*time.Second, "demoapp to listen", func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return cmd
}
