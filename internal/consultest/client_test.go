package consultest

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// A node dies with its client agent: sessions bound to its serfHealth end,
// and a restarted client agent rejoins as the same node. The agent
// benchmarks kill nodes this way.
func TestKilledClientEndsItsSessions(t *testing.T) {
	srv := NewDev(t)
	cl := NewClients(t, srv, 1, "")[0]
	sid, _, err := cl.Client().Session().Create(&api.SessionEntry{Behavior: api.SessionBehaviorDelete,
		NodeChecks: []string{"serfHealth"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e, _, err := srv.Client().Session().Info(sid, nil); err != nil || e == nil || e.Node != cl.Name {
		t.Fatalf("session %s seen by the server: %+v, %v; want it on node %s", sid, e, err, cl.Name)
	}
	cl.Kill()
	gone := false
	for deadline := time.Now().Add(time.Minute); !gone && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		e, _, err := srv.Client().Session().Info(sid, nil)
		gone = err == nil && e == nil
	}
	if !gone {
		t.Fatal("the session outlived its node's client agent by a minute")
	}
	if err := cl.Restart(); err != nil {
		t.Fatalf("restart the client agent: %v", err)
	}
}

// A test that polls through Client for a minute sends a few hundred
// requests; each must find Consul answering, never past its limit of
// connections per client address (a CI run failed on such a 429).
func TestClientPollsWithoutLeakingConnections(t *testing.T) {
	srv := NewDev(t)
	const polls = 260 // past limits.http_max_conns_per_client, 200
	for i := range polls {
		if _, err := srv.Client().Agent().Checks(); err != nil {
			t.Fatalf("poll %d of %d: %v", i+1, polls, err)
		}
	}
}
