package fleetbench

import (
	"cmp"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/benchkit"
)

// What BenchmarkFleet measures besides the rollout itself: the lower
// bound, the CPU the machine spent, and a profile of a Consul agent.

// casBound times n CAS writes of one key, one after another by one client:
// the rollout's lower bound when n is three per node.
func casBound(b *testing.B, c *api.Client, key string, n int) time.Duration {
	var index uint64
	start := time.Now()
	for range n {
		ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: key, Value: []byte("x"), Index: index}}}
		ok, resp, _, err := c.Txn().Txn(ops, nil)
		if err != nil || !ok {
			b.Fatalf("bound CAS: ok=%v err=%v", ok, err)
		}
		index = resp.Results[0].KV.ModifyIndex
	}
	d := time.Since(start)
	_, _ = c.KV().Delete(key, nil)
	return d
}

// fleetCPU is the CPU time used so far by this process and by the Consul
// agents, from /proc.
func (f *benchFleet) fleetCPU() (agents, consul time.Duration) {
	self, err := benchkit.ReadProcStat(os.Getpid())
	if err != nil {
		f.b.Fatal(err)
	}
	for _, s := range f.processes() {
		st, err := benchkit.ReadProcStat(s.PID())
		if err != nil {
			f.b.Fatal(err)
		}
		consul += st.CPU
	}
	return self.CPU, consul
}

// profiled is the Consul agent to profile: the server, or with
// FLEET_BENCH_CONSUL_PROFILE_TARGET=client the first client agent, if any.
func (f *benchFleet) profiled() string {
	if os.Getenv("FLEET_BENCH_CONSUL_PROFILE_TARGET") == "client" && len(f.clients) > 0 {
		return f.clients[0].HTTPAddr
	}
	return f.srv.HTTPAddr
}

// profileConsul starts a CPU profile of the Consul agent, when
// FLEET_BENCH_CONSUL_PROFILE names a file to write it to, for
// FLEET_BENCH_CONSUL_PROFILE_SECONDS (default 10). The func returned waits
// for it. It needs enable_debug, which fleetHCL and fleetClientHCL set.
func profileConsul(b *testing.B, addr string) (wait func()) {
	path := os.Getenv("FLEET_BENCH_CONSUL_PROFILE")
	if path == "" {
		return func() {}
	}
	secs := cmp.Or(os.Getenv("FLEET_BENCH_CONSUL_PROFILE_SECONDS"), "10")
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=" + secs)
		if err != nil {
			b.Errorf("consul profile: %v", err)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(path, body, 0o644)
		}
		if err != nil {
			b.Errorf("consul profile: %v", err)
		}
	}()
	return func() { <-done }
}

// profileAgents starts a CPU profile of this process, which runs every
// agent, when FLEET_BENCH_AGENT_PROFILE names a file to write it to; the
// func returned stops it, once the rollout is over, so the agents' start-up
// is not in it. Not with -test.cpuprofile, which holds the one profile.
func profileAgents(b *testing.B) (stop func()) {
	path := os.Getenv("FLEET_BENCH_AGENT_PROFILE")
	if path == "" {
		return func() {}
	}
	out, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(out)
	}
	if err != nil {
		b.Errorf("agent profile: %v", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := out.Close(); err != nil {
			b.Errorf("agent profile: %v", err)
		}
	}
}
