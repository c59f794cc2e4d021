package consultest

import (
	"errors"
	"fmt"
	"testing"
)

// NewCluster starts n persistent servers on loopback that form one cluster,
// and stops them when the test ends.
func NewCluster(t testing.TB, n int) []*Server {
	t.Helper()
	return NewClusterHCL(t, n, "")
}

// NewClusterHCL is NewCluster with hcl, extra configuration for every
// server (limits or log level, say).
func NewClusterHCL(t testing.TB, n int, hcl string) []*Server {
	t.Helper()
	return newCluster(t, n, hcl, nil)
}

// newCluster is NewClusterHCL; beforeStart, when set, sees the servers
// with their ports chosen, before any starts: a test takes a port there.
func newCluster(t testing.TB, n int, hcl string, beforeStart func([]*Server)) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	join := make([]string, n)
	for i := range servers {
		servers[i] = prepare(t, Options{Persistent: true, BootstrapExpect: n, HCL: hcl})
		join[i] = servers[i].SerfAddr
	}
	if beforeStart != nil {
		beforeStart(servers)
	}
	for i, s := range servers {
		s.opts.Join = append(append([]string{}, join[:i]...), join[i+1:]...)
		if err := s.Start(); err != nil {
			t.Fatalf("consultest: %v", err)
		}
	}
	// A server moved to new ports joins the others itself.
	waitUp(t, servers)
	return servers
}

// Leader returns the one of servers that is the Raft leader now, by each
// one's own agent/self.
func Leader(servers []*Server) (*Server, error) {
	var errs []error
	for _, s := range servers {
		self, err := s.Client().Agent().Self()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		raft, _ := self["Stats"]["raft"].(map[string]any)
		if raft["state"] == "Leader" {
			return s, nil
		}
	}
	return nil, fmt.Errorf("consultest: no leader among %d servers: %w", len(servers), errors.Join(errs...))
}

// NewClients starts n client agents on loopback joined to server, each with
// its own HTTP address, and stops them when the test ends: a node each, for
// tests that kill a node by killing its agent. hcl is extra configuration
// for every client, for example a gossip_lan block matching the server's.
func NewClients(t testing.TB, server *Server, n int, hcl string) []*Server {
	t.Helper()
	return NewClientsOf(t, []*Server{server}, n, hcl)
}

// NewClientsOf is NewClients joined to every one of servers: they start
// together, then each is waited for.
func NewClientsOf(t testing.TB, servers []*Server, n int, hcl string) []*Server {
	t.Helper()
	join := make([]string, len(servers))
	for i, s := range servers {
		join[i] = s.SerfAddr
	}
	clients := make([]*Server, n)
	for i := range clients {
		clients[i] = prepare(t, Options{Client: true, Join: join, HCL: hcl})
		if err := clients[i].Start(); err != nil {
			t.Fatalf("consultest: %v", err)
		}
	}
	waitUp(t, clients)
	return clients
}

// waitUp waits for each of ss, started, to answer, then for each to be
// ready. Another process can take one of an agent's ports between our
// choosing them and consul binding them (many agents starting together
// make outgoing connections from the same range); consul then exits at
// once, and is started again on new ports, up to three times. Each must
// answer before any is waited on for a leader: a cluster that lost a
// server that way has no leader until that one is moved.
func waitUp(t testing.TB, ss []*Server) {
	t.Helper()
	for _, s := range ss {
		if err := answerOrMove(t, s); err != nil {
			t.Fatalf("consultest: %v", err)
		}
	}
	for _, s := range ss {
		if err := s.WaitReady(StartTimeout); err != nil {
			t.Fatalf("consultest: %v", err)
		}
	}
}

func answerOrMove(t testing.TB, s *Server) error {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := s.waitAnswering(StartTimeout)
		if err == nil || !errors.Is(err, errExited) || attempt == 3 {
			return err
		}
		t.Logf("consultest: retrying on other ports: %v", err)
		s.Stop()
		s.pickPorts(t)
		if err := s.Start(); err != nil {
			return err
		}
	}
}

// NewZoneClient starts a client agent joined to server whose node meta puts
// it in zone, the key the tests spread a rollout over.
func NewZoneClient(t testing.TB, server *Server, zone string) *Server {
	t.Helper()
	return NewClients(t, server, 1, fmt.Sprintf("node_meta {\n  zone = %q\n}\n", zone))[0]
}
