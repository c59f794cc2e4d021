package consultest

import (
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
