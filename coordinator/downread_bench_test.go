package coordinator_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// BenchmarkDownRead measures what one Down call reads (requests and bytes
// of JSON) in a group of 1,000 converged nodes with 0, 1 and 10 of them
// down: half with a critical workload check, half stopped cleanly (a stop
// mark and its index key). The records are written as raw JSON, as the
// fleet's agents write them, with "stop_index", so that the benchmark
// builds and runs unchanged on a version from before the index, for the
// ratio. The first Down (a full read, which writes downcheck) is not
// measured: the figures are those of the grants within fullReadEvery
// of a full read; "full" deletes downcheck before each call, for the cost
// of the full read that one grant in every fullReadEvery makes. "checks"
// registers every other node's instance too, its workload and alive checks
// passing, as a fleet's catalog holds them: the checks Consul's server
// walks when asked for every state.
func BenchmarkDownRead(b *testing.B) {
	const nodes = 1000
	cases := []struct {
		down   int
		stale  bool // downcheck deleted before each call: a full read every time
		checks bool // every node's instance registered, as in a fleet: the checks Consul walks
	}{{0, false, false}, {1, false, false}, {10, false, false}, {0, true, false}, {0, false, true}, {10, false, true}}
	for _, tc := range cases {
		name := fmt.Sprintf("N=%d/down=%d", nodes, tc.down)
		if tc.stale {
			name += "/full"
		}
		if tc.checks {
			name += "/checks"
		}
		down := tc.down
		b.Run(name, func(b *testing.B) {
			srv := consultest.NewDev(b)
			c, n := testkit.CountedClient(srv)
			st := coordinator.NewStore(c, coordinator.DefaultPrefix)
			// As an agent's store; asserted, so that the file builds on a
			// version from before the mark, for the ratio.
			if w, ok := any(st).(interface{ WriteDownChecks(hclog.Logger) }); ok {
				w.WriteDownChecks(hclog.NewNullLogger())
			}
			putFleet(b, srv, nodes, down)
			if tc.checks {
				registerPassing(b, srv, down, nodes)
			}
			if _, err := st.Down(b.Context(), "web"); err != nil {
				b.Fatal(err)
			}
			k, _ := coordinator.NewKeys(coordinator.DefaultPrefix, "web")
			reqs, bytes := n.Total(), n.Bytes()
			cpu0 := consulCPU(b, srv)
			b.ResetTimer()
			for b.Loop() {
				if tc.stale {
					b.StopTimer()
					if _, err := srv.Client().KV().Delete(k.Root()+"downcheck", nil); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				got, err := st.Down(b.Context(), "web")
				if err != nil || len(got) != down {
					b.Fatalf("Down = %d nodes, %v; want %d", len(got), err, down)
				}
			}
			b.ReportMetric(float64(n.Total()-reqs)/float64(b.N), "reqs/op")
			b.ReportMetric(float64(n.Bytes()-bytes)/float64(b.N), "bytes/op")
			if !tc.stale { // there Consul's time counts the delete of downcheck too
				b.ReportMetric(float64((consulCPU(b, srv)-cpu0).Microseconds())/float64(b.N), "consul-cpu-us/op")
			}
		})
	}
}

// putFleet writes the records of nodes n0001.. of group web, converged, on
// the server's Consul node, and makes down of them down.
func putFleet(b *testing.B, srv *consultest.Server, nodes, down int) {
	b.Helper()
	c := srv.Client()
	k, _ := coordinator.NewKeys(coordinator.DefaultPrefix, "web")
	sha := strings.Repeat("ab", 32)
	since := time.Now().UTC()
	var ops api.TxnOps
	flush := func() {
		if ok, resp, _, err := c.Txn().Txn(ops, nil); err != nil || !ok {
			b.Fatalf("write records: %v %v", err, resp)
		}
		ops = nil
	}
	for i := range nodes {
		name := fmt.Sprintf("n%04d", i)
		rec := map[string]any{"node": name, "sha": sha, "desired": sha, "state": "converged", "since": since,
			"consul_node": srv.Name, "image_id": "sha256:" + strings.Repeat("cd", 32), "stop_index": true}
		switch {
		case i < down && i%2 == 1:
			rec["stopped"] = since
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Root() + "stopped/" + name, Value: []byte(since.Format(time.RFC3339Nano))}})
		case i < down:
			err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.ServiceID("web", name),
				Name: coordinator.ServiceName("web"), Check: &api.AgentServiceCheck{CheckID: coordinator.WorkloadCheckID("web", name), TTL: "10m", Status: api.HealthCritical}})
			if err != nil {
				b.Fatal(err)
			}
		}
		v, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Node(name), Value: v}})
		if len(ops) >= 60 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
}

// registerPassing registers the instances of nodes n<from>.. to n<to-1>
// of group web, each with its workload and alive checks passing, as the
// Consul catalog of a fleet holds them.
func registerPassing(b *testing.B, srv *consultest.Server, from, to int) {
	b.Helper()
	for i := from; i < to; i++ {
		name := fmt.Sprintf("n%04d", i)
		err := srv.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{ID: coordinator.ServiceID("web", name),
			Name: coordinator.ServiceName("web"), Checks: api.AgentServiceChecks{
				{CheckID: coordinator.WorkloadCheckID("web", name), TTL: "10m", Status: api.HealthPassing},
				{CheckID: coordinator.ServiceID("web", name) + ":alive", TTL: "10m", Status: api.HealthPassing}}})
		if err != nil {
			b.Fatal(err)
		}
	}
	// The agent syncs them to the catalog, which Down reads, by itself.
	q := &api.QueryOptions{Filter: fmt.Sprintf("ServiceName == %q", coordinator.ServiceName("web"))}
	if !testkit.Poll(time.Minute, func() bool {
		checks, _, err := srv.Client().Health().State(api.HealthPassing, q)
		return err == nil && len(checks) == 2*(to-from)
	}) {
		b.Fatalf("the catalog does not hold the %d passing checks after a minute", 2*(to-from))
	}
}

// consulCPU is the CPU time the Consul agent has used so far: what Down
// costs the server, which its own time on an idle machine hides.
func consulCPU(b *testing.B, srv *consultest.Server) time.Duration {
	st, err := benchkit.ReadProcStat(srv.PID())
	if err != nil {
		b.Fatal(err)
	}
	return st.CPU
}
