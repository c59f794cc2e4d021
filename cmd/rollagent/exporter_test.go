package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// startExporter runs `rollagent exporter` for groups against addr on an
// ephemeral port, and returns its /metrics URL; it is stopped, and waited
// for, when the test ends.
func startExporter(t *testing.T, addr string, groups ...string) string {
	t.Helper()
	return startExporterArgs(t, append([]string{"--consul-addr=" + addr, "exporter", "--listen", "127.0.0.1:0"}, groups...)...)
}

// startExporterArgs is startExporter with the whole command line.
func startExporterArgs(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testkit.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, &testkit.Buffer{}, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("the exporter did not stop within 30s of its context; log:\n%s", stderr.String())
		}
	})
	waitOutput(t, &stderr, 0, "serving")
	m := regexp.MustCompile(`serving: addr=(\S+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no address in the exporter's log:\n%s", stderr.String())
	}
	return "http://" + m[1] + "/metrics"
}

// scrape reads url's metrics as name -> labels but group -> value.
func scrape(url string) (map[string]map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	list := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		list = append(list, f)
	}
	return byName(list), nil
}

// scrapeUntil scrapes url until every want holds (metric name, labels but
// group, value), or fails the test after 30s with the last scrape.
func scrapeUntil(t *testing.T, url string, want map[[2]string]float64) map[string]map[string]float64 {
	t.Helper()
	var got map[string]map[string]float64
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, err = scrape(url); err == nil && holds(got, want) {
			return got
		}
	}
	t.Fatalf("metrics never showed %v; last scrape (error %v):\n%v", want, err, got)
	return nil
}

func holds(got map[string]map[string]float64, want map[[2]string]float64) bool {
	for k, v := range want {
		if g, ok := got[k[0]][k[1]]; !ok || g != v {
			return false
		}
	}
	return true
}

// The exporter shows a committed group's gate, its nodes by state and its
// progress as `status` reads them from Consul; a cancel turns the gate to
// cancelled; a Consul that stops answering sets up to 0 and counts errors.
func TestExporterGroupMetrics(t *testing.T) {
	srv := consultest.NewDev(t)
	sha := commitWeb(t, srv.HTTPAddr)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	old := "0000000000000000000000000000000000000000000000000000000000000000"
	converged := time.Now() // after the commit: a convergence it counts from
	putNode(t, st, coordinator.NodeState{Node: "a", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: converged})
	putNode(t, st, coordinator.NodeState{Node: "b", SHA: old, Desired: sha, State: coordinator.StateWaiting, Since: time.Now()})
	putNode(t, st, coordinator.NodeState{Node: "c", SHA: old, Desired: sha, State: coordinator.StateFailed, Since: time.Now()})
	putNode(t, st, coordinator.NodeState{Node: "d", SHA: old, Desired: sha, State: coordinator.StateReplacing, Since: time.Now()})
	url := startExporter(t, srv.HTTPAddr, "web")

	got := scrapeUntil(t, url, map[[2]string]float64{
		{"rollagent_group_up", ""}:                   1,
		{"rollagent_group_gate", "state=open"}:       1,
		{"rollagent_group_gate", "state=cancelled"}:  0,
		{"rollagent_group_gate", "state=paused"}:     0,
		{"rollagent_group_nodes", "state=converged"}: 1,
		{"rollagent_group_nodes", "state=waiting"}:   1,
		{"rollagent_group_nodes", "state=failed"}:    1,
		{"rollagent_group_nodes", "state=replacing"}: 1,
		{"rollagent_group_nodes", "state=verifying"}: 0,
		{"rollagent_group_nodes", "state=unknown"}:   0,
		{"rollagent_group_nodes_behind", ""}:         3,
		{"rollagent_group_stalled", ""}:              0,
		{"rollagent_group_max_parallel", ""}:         1,
		{"rollagent_group_read_errors_total", ""}:    0,
	})
	since := got["rollagent_group_seconds_since_converged"][""]
	if max := time.Since(converged).Seconds(); since <= 0 || since > max {
		t.Errorf("seconds since converged %v, want between 0 and %v", since, max)
	}

	if code, _, errs := runCLI(t, srv.HTTPAddr, "cancel", "web", "--reason", "test"); code != 0 {
		t.Fatalf("cancel: code %d, stderr %s", code, errs)
	}
	scrapeUntil(t, url, map[[2]string]float64{
		{"rollagent_group_gate", "state=open"}:      0,
		{"rollagent_group_gate", "state=cancelled"}: 1,
		{"rollagent_group_up", ""}:                  1,
	})

	srv.Stop()
	got = scrapeUntil(t, url, map[[2]string]float64{{"rollagent_group_up", ""}: 0})
	if n := got["rollagent_group_read_errors_total"][""]; n < 1 {
		t.Errorf("read errors %v after Consul stopped, want at least 1", n)
	}
	// The last state read stays exported beside up=0.
	if v := got["rollagent_group_gate"]["state=cancelled"]; v != 1 {
		t.Errorf("gate{state=cancelled} %v after Consul stopped, want the last read's 1", v)
	}
}

// Pointed at a port where nothing listens, the exporter still serves, with
// up at 0 and the failed reads counted, for every group it was given.
func TestExporterConsulUnreachable(t *testing.T) {
	closed := closedAddr(t)
	url := startExporter(t, closed, "web", "api")
	got := scrapeUntil(t, url, map[[2]string]float64{{"rollagent_group_up", ""}: 0})
	if n := got["rollagent_group_read_errors_total"][""]; n < 1 {
		t.Errorf("read errors %v, want at least 1", n)
	}
	if _, ok := got["rollagent_group_gate"]; ok {
		t.Errorf("gate exported with no read ever made: %v", got["rollagent_group_gate"])
	}
}

// --timeout bounds each of the exporter's reads, not its life: it still
// serves, and counts the failed reads, long after the bound.
func TestExporterOutlivesTimeout(t *testing.T) {
	closed := closedAddr(t)
	url := startExporterArgs(t, "--consul-addr="+closed, "--timeout=1s", "exporter", "--listen", "127.0.0.1:0", "web")
	time.Sleep(2500 * time.Millisecond)
	got, err := scrape(url)
	if err != nil {
		t.Fatalf("the exporter stopped serving after --timeout=1s: %v", err)
	}
	if up, ok := got["rollagent_group_up"][""]; !ok || up != 0 {
		t.Errorf("up %v (exported %v), want 0", up, ok)
	}
}

// A bad group name is refused before anything is served.
func TestExporterBadGroup(t *testing.T) {
	code, _, errs := runCLI(t, "127.0.0.1:1", "exporter", "--listen", "127.0.0.1:0", "web", "no/slash")
	if code == 0 || !regexp.MustCompile(`group: `).MatchString(errs) {
		t.Fatalf("code %d, stderr %q; want a refusal naming the group", code, errs)
	}
}

// closedAddr is a loopback address where nothing listens any more.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
