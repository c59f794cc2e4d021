package fleetbench

import (
	"testing"

	"github.com/rollagent/rollagent/internal/consultest"
)

// fleetConsul is the Consul a case runs on: srv is the agent the harness
// talks to (the dev agent, or the cluster's leader when the case began),
// servers the whole cluster (nil with a dev agent), clients the client
// agents the nodes' agents are spread over (none: they all talk to srv).
type fleetConsul struct {
	srv     *consultest.Server
	servers []*consultest.Server
	clients []*consultest.Server
}

// clusterServers and clusterClients shape the cluster cases: three
// servers, as a production datacenter runs, and a client agent per 50
// nodes at N = 1,000. A real fleet has one per node; 1,000 Consul agents
// do not fit on this machine.
const (
	clusterServers = 3
	clusterClients = 20
	// clusterHCL is fleetHCL with Prometheus metrics kept, whose FSM
	// counters say what the Raft writes of an idle window were
	// (idleFSM).
	clusterHCL = fleetHCL + `
telemetry {
  prometheus_retention_time = "1h"
  disable_hostname = true
}`
)

// startConsul starts the case's Consul, fresh, stopped when the case
// ends (consultest stops every process it started, on failure too): a dev
// agent, or fc.servers servers that elect a leader, and fc.clients client
// agents joined to it or them.
func startConsul(b *testing.B, fc fleetCase) fleetConsul {
	if fc.servers == 0 {
		srv := consultest.New(b, consultest.Options{HCL: fleetHCL})
		clients := make([]*consultest.Server, fc.clients)
		for i := range clients {
			clients[i] = consultest.New(b, consultest.Options{Client: true, Join: []string{srv.SerfAddr}, HCL: fleetClientHCL})
		}
		return fleetConsul{srv: srv, clients: clients}
	}
	servers := consultest.NewClusterHCL(b, fc.servers, clusterHCL)
	leader, err := consultest.Leader(servers)
	if err != nil {
		b.Fatal(err)
	}
	return fleetConsul{srv: leader, servers: servers, clients: consultest.NewClientsOf(b, servers, fc.clients, fleetClientHCL)}
}

// leader is the agent whose last_log_index counts Raft writes: the dev
// agent, or whichever server leads now.
func (c fleetConsul) leader() (*consultest.Server, error) {
	if len(c.servers) == 0 {
		return c.srv, nil
	}
	return consultest.Leader(c.servers)
}

// raftAt is the agent that leads now (leader) and its last_log_index,
// failing the bench if either cannot be read.
func (f *benchFleet) raftAt() (*consultest.Server, uint64) {
	lead, err := f.leader()
	if err != nil {
		f.b.Fatal(err)
	}
	index, err := raftIndex(lead.Client())
	if err != nil {
		f.b.Fatal(err)
	}
	return lead, index
}

// processes are every Consul agent of the case, for its CPU time.
func (c fleetConsul) processes() []*consultest.Server {
	if len(c.servers) == 0 {
		return append([]*consultest.Server{c.srv}, c.clients...)
	}
	return append(append([]*consultest.Server{}, c.servers...), c.clients...)
}
