package fleetbench

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FLEET_BENCH_IDLE, a duration, has each case watch its converged fleet
// for that long after the rollout: what an idle group costs Consul. The
// agents look again every agent.DefaultResync (5 min) whatever happens,
// each at its own time, so a window a little over that sees every agent's
// idle look once (issue 30, item 5).
const idleEnv = "FLEET_BENCH_IDLE"

// idleResult is what the fleet sent while idle, over window.
type idleResult struct {
	window    time.Duration
	endpoints map[string]int64
	requests  int64
	bytes     int64 // response bodies read
	raft      uint64
	// aeBytes is the JSON of one client agent's Consul node's services and
	// checks (/v1/catalog/node-services and /v1/health/node), what its
	// anti-entropy's full sync reads from the servers, and aeNodes the
	// nodes whose agents it carries.
	aeBytes, aeNodes int
	// fsm is what the leader's FSM applied over the window, by kind, from
	// its Prometheus counters (clusterHCL keeps them): the Raft writes
	// told apart. Empty without them.
	fsm map[string]float64
}

// perNodeHour scales a count over the window to one node and one hour.
func (ir *idleResult) perNodeHour(v float64, n int) float64 {
	return v / float64(n) * float64(time.Hour) / float64(ir.window)
}

// idle counts the fleet's requests and the Raft writes over window, with
// nothing committed.
func (f *benchFleet) idle(r *fleetResult, window time.Duration) {
	lead0, raft0 := f.raftAt()
	fsm0 := fsmCounts(lead0.HTTPAddr)
	f.traffic.record(time.Now())
	time.Sleep(window)
	evs, endpoints := f.traffic.stop()
	lead1, raft1 := f.raftAt()
	ir := &idleResult{window: window, endpoints: maps.Clone(endpoints), requests: int64(len(evs)), raft: raft1 - raft0}
	for i := range f.traffic.bytes {
		ir.bytes += f.traffic.bytes[i].Load()
	}
	if len(f.clients) > 0 {
		ir.aeBytes, ir.aeNodes = f.aeBytes(), (f.fc.n+len(f.clients)-1)/len(f.clients)
	}
	r.idle = ir
	if lead1 == lead0 {
		ir.fsm = fsmDiff(fsm0, fsmCounts(lead1.HTTPAddr))
	}
	n := f.fc.n
	f.b.ReportMetric(ir.perNodeHour(float64(ir.requests), n), "idle-req/node/h")
	f.b.ReportMetric(ir.perNodeHour(float64(ir.bytes)/1024, n), "idle-kb/node/h")
	f.b.ReportMetric(ir.perNodeHour(float64(ir.raft), 1), "idle-raft/h")
	f.b.Log(ir.summary(n))
}

// aeBytes reads what the first client agent's anti-entropy reads of its
// own Consul node in a full sync, as JSON.
func (f *benchFleet) aeBytes() int {
	c := f.clients[0]
	total := 0
	for _, path := range []string{"/v1/catalog/node-services/" + c.Name, "/v1/health/node/" + c.Name} {
		resp, err := http.Get("http://" + c.HTTPAddr + path)
		if err != nil {
			f.b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			f.b.Fatalf("GET %s: %s, %v", path, resp.Status, err)
		}
		total += int(n)
	}
	return total
}

// summary is the idle window in words, for the log.
func (ir *idleResult) summary(n int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "idle %s: %d requests (%.2f per node per hour), %d KB read (%.1f KB per node per hour), %d Raft writes (%.0f per hour)",
		ir.window, ir.requests, ir.perNodeHour(float64(ir.requests), n), ir.bytes/1024, ir.perNodeHour(float64(ir.bytes)/1024, n),
		ir.raft, ir.perNodeHour(float64(ir.raft), 1))
	if ir.aeNodes > 0 {
		fmt.Fprintf(&sb, "; a client agent's node services and checks: %d bytes for %d nodes' agents", ir.aeBytes, ir.aeNodes)
	}
	for _, k := range slices.Sorted(maps.Keys(ir.fsm)) {
		fmt.Fprintf(&sb, "\n  Raft, the leader's FSM applied %s: %.0f", k, ir.fsm[k])
	}
	for _, e := range slices.Sorted(maps.Keys(ir.endpoints)) {
		fmt.Fprintf(&sb, "\n  %s: %d (%.2f per node per hour)", e, ir.endpoints[e], ir.perNodeHour(float64(ir.endpoints[e]), n))
	}
	return sb.String()
}

// idleWindow is FLEET_BENCH_IDLE, or 0 when unset.
func idleWindow(b *testing.B) time.Duration { return envDuration(b, idleEnv, 0) }

// fsmCounts reads the count of every consul.fsm.* summary from the agent
// at addr's Prometheus metrics, by name and labels; nil when it keeps
// none.
func fsmCounts(addr string) map[string]float64 {
	resp, err := http.Get("http://" + addr + "/v1/agent/metrics?format=prometheus")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "consul_fsm_") || !strings.Contains(name, "_count") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// fsmDiff is after less before, the kinds that moved.
func fsmDiff(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v -= before[k]; v != 0 {
			d[k] = v
		}
	}
	return d
}
