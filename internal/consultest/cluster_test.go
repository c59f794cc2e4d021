package consultest

import (
	"net"
	"strconv"
	"testing"

	"github.com/hashicorp/consul/api"
)

// A cluster's servers agree on one leader, and a client agent joined to
// them all writes through it: the fleet bench counts Raft writes on the
// leader it finds this way.
func TestClusterLeaderAndClients(t *testing.T) {
	servers := NewClusterHCL(t, 3, `log_level = "warn"`)
	leader, err := Leader(servers)
	if err != nil {
		t.Fatal(err)
	}
	cl := NewClientsOf(t, servers, 1, "")[0]
	if _, err := cl.Client().KV().Put(&api.KVPair{Key: "consultest/cluster", Value: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		peers, err := s.Client().Status().Peers()
		if err != nil || len(peers) != len(servers) {
			t.Fatalf("server %s (leader %s): raft peers %v, %v; want %d", s.Name, leader.Name, peers, err, len(servers))
		}
	}
}

// A server that cannot bind a port it was given (another process took it
// after we chose it) exits at once; the cluster starts anyway, with that
// server moved to new ports, rather than waiting a minute on a leader that
// needs it.
func TestClusterMovesAServerWhosePortWasTaken(t *testing.T) {
	var taken net.Listener
	servers := newCluster(t, 3, `log_level = "warn"`, func(ss []*Server) {
		var err error
		taken, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ss[2].ports[2]))
		if err != nil {
			t.Fatalf("take the serf wan port: %v", err)
		}
	})
	defer taken.Close()
	if _, err := Leader(servers); err != nil {
		t.Fatal(err)
	}
	if taken.Addr().(*net.TCPAddr).Port == servers[2].ports[2] {
		t.Fatalf("server 3 still on the taken port %v", taken.Addr())
	}
}
