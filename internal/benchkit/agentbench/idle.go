package agentbench

import (
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/benchkit"
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

// Idle observes, over idleWindow, two converged `rollagent
// run` processes (exec runtime) side by side, one that serves its health
// on loopback for Consul to check (the default, --health-addr=auto, as it
// reaches Consul over loopback) and one whose workload check is a TTL check
// it passes (--health-addr=off); each talks to the node's Consul client
// agent through a counting reverse proxy of its own. Two baselines run in
// the same window: that Consul client agent, and an idle minimal Go HTTP
// server (demoapp).
func Idle(b *testing.B) {
	srv := consultest.NewDev(b)
	client := consultest.NewClients(b, srv, 1, "")[0]
	ba := newAgents(b, srv.Client(), "idle", 0)
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
	publish(b, "idle", idleMarkdown(procs, agents))
}

// observeIdle samples procs every second over idleWindow, and records in
// each agent the requests its proxy saw start in the window, and those in
// flight at its end, by class.
func observeIdle(b *testing.B, procs []*idleProc, agents []*idleAgent) {
	b.Helper()
	start := make([]benchkit.ProcStat, len(procs))
	for i, p := range procs {
		st, err := benchkit.ReadProcStat(p.pid)
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
			st, err := benchkit.ReadProcStat(p.pid)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			p.maxRSS = max(p.maxRSS, st.RSSKB)
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
		st, err := benchkit.ReadProcStat(p.pid)
		if err != nil {
			b.Fatal(err)
		}
		p.cpu, p.onCPU, p.childCP = st.CPU-start[i].CPU, st.OnCPU-start[i].OnCPU, st.Children-start[i].Children
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
	sb.WriteString(header("BenchmarkAgentIdle"))
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
			benchkit.Ms(p.onCPU), cpuPercent(p.onCPU), p.childCP.Seconds(), benchkit.Ratio(float64(first.maxRSS), float64(p.maxRSS)),
			benchkit.Ratio(first.onCPU.Seconds(), p.onCPU.Seconds()))
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
