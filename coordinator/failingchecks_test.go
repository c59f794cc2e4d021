package coordinator

import (
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
			<-critAnswered
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
