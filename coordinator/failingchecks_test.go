package coordinator

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/testkit"
)

// roundTrip is an http.RoundTripper of a func.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A check that goes from warning to critical between Down's reads of the
// two states is in neither answer: the two disagree on the index of the
// checks table, and Down reads every state instead of missing the node.
func TestDownSeesACheckThatMovesBetweenItsReads(t *testing.T) {
	f := newDownFixture(t)
	f.reg(t, "web", "n1", api.HealthWarning, "")
	f.put(t, "web", NodeState{Node: "n1", SHA: downSHA, ConsulNode: f.srv.Name}, false)
	if got, _ := f.down(t, "web"); got["n1"] != DownWorkload {
		t.Fatalf("Down before the move = %v; want n1 %s", got, DownWorkload)
	}
	// The first read of the warning state waits for the first read of the
	// critical state to answer, and for n1's check to be critical in the
	// catalog, before it is sent.
	critAnswered := make(chan struct{})
	var once sync.Once
	moved := false
	next := &testkit.Counter{}
	rt := roundTrip(func(r *http.Request) (*http.Response, error) {
		switch r.URL.Path {
		case "/v1/health/state/critical":
			resp, err := next.RoundTrip(r)
			once.Do(func() { close(critAnswered) })
			return resp, err
		case "/v1/health/state/warning":
			select {
			case <-critAnswered:
			case <-time.After(30 * time.Second):
				return nil, errors.New("the critical state was never read")
			}
			if !moved {
				moved = f.moveCheck(WorkloadCheckID("web", "n1"), api.HealthCritical)
			}
		}
		return next.RoundTrip(r)
	})
	st := NewStore(f.srv.ClientVia(rt), DefaultPrefix)
	st.now = func() time.Time { return f.now }
	got, err := st.Down(t.Context(), "web")
	if err != nil {
		t.Fatal(err)
	}
	if !moved {
		t.Fatal("n1's check did not turn critical in the catalog")
	}
	if got["n1"] != DownWorkload || next.To("GET", "/v1/health/state/any") != 1 {
		t.Fatalf("Down = %v after %d reads of every state; want n1 %s, after one", got, next.To("GET", "/v1/health/state/any"), DownWorkload)
	}
}

// moveCheck sets the TTL check id of the Consul agent to status, and says
// whether the catalog shows it within 10 s.
func (f *downFixture) moveCheck(id, status string) bool {
	c := f.srv.Client()
	if err := c.Agent().UpdateTTL(id, "", status); err != nil {
		return false
	}
	return testkit.Poll(10*time.Second, func() bool {
		checks, _, err := c.Health().State(status, &api.QueryOptions{Filter: "CheckID == " + `"` + id + `"`})
		return err == nil && len(checks) == 1
	})
}

// A failing check of a node's service that the token may not read (a
// policy that denies the group's service) fails Down, rather than leave
// that node out of the count: Consul filters by ACL after the filter, so
// what it says it left out is a check Down would have counted.
func TestDownRefusesAFailingCheckItMayNotRead(t *testing.T) {
	srv := newACLServer(t)
	st := NewStore(srv.Client(), DefaultPrefix)
	if err := st.PutNode(t.Context(), "web", NodeState{Node: "n1", SHA: downSHA, State: StateConverged, Since: time.Now().UTC(), StopIndex: true}); err != nil {
		t.Fatal(err)
	}
	err := srv.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{ID: ServiceID("web", "n1"), Name: ServiceName("web"),
		Check: &api.AgentServiceCheck{CheckID: WorkloadCheckID("web", "n1"), TTL: "1m", Status: api.HealthCritical}})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys("web")
	reads := `key_prefix "` + k.Root() + `" { policy = "read" }
node_prefix "" { policy = "read" }
service_prefix "" { policy = "read" }`
	testkit.Eventually(t, 10*time.Second, "n1 down to a token that may read it", func() bool {
		got, err := NewStore(tokenClient(t, srv, reads), DefaultPrefix).Down(t.Context(), "web")
		return err == nil && got["n1"] == DownWorkload
	})
	denied := reads + "\nservice \"" + ServiceName("web") + "\" { policy = \"deny\" }"
	got, err := NewStore(tokenClient(t, srv, denied), DefaultPrefix).Down(t.Context(), "web")
	if !errors.Is(err, ErrACLDenied) {
		t.Fatalf("Down with a token that may not read the group's service = %v, %v; want an error wrapping ErrACLDenied", got, err)
	}
}

// A workload check whose status is none of Consul's three (the agent API
// refuses such a status, a catalog write does not) is in no status's
// index: a full read reads every status and counts its node, as any
// status but passing is, and its mark makes every Down after it a full
// read for as long as such a check is there.
func TestDownFullReadCountsACheckOfAnotherStatus(t *testing.T) {
	f := newDownFixture(t)
	f.put(t, "web", NodeState{Node: "n1", SHA: downSHA, ConsulNode: "ext1"}, false)
	_, err := f.srv.Client().Catalog().Register(&api.CatalogRegistration{Node: "ext1", Address: "127.0.0.2",
		Service: &api.AgentService{ID: ServiceID("web", "n1"), Service: ServiceName("web")},
		Check:   &api.AgentCheck{Node: "ext1", CheckID: WorkloadCheckID("web", "n1"), ServiceID: ServiceID("web", "n1"), Status: "maintenance"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		got, full := f.down(t, "web")
		if !full || got["n1"] != DownWorkload {
			t.Fatalf("Down #%d = %v (full read %v); want n1 %s on a full read", i+1, got, full, DownWorkload)
		}
	}
}
