package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// failLift refuses putting api-1 into maintenance and every lift, while on:
// a local agent that fails mid-drain and stays failing for the lift.
type failLift struct {
	next testkit.Counter
	on   atomic.Bool
}

func (d *failLift) RoundTrip(r *http.Request) (*http.Response, error) {
	if d.on.Load() && r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/agent/service/maintenance/") &&
		(r.URL.Query().Get("enable") == "false" || strings.HasSuffix(r.URL.Path, "/web-1")) {
		return consulReply(r, http.StatusInternalServerError, "rpc error: timeout"), nil
	}
	return d.next.RoundTrip(r)
}

// A drain half set (one service refused) whose lift fails too leaves the
// node out of service: it must not give its slot back until the lift
// succeeds, or the next node is taken down beside it.
func TestDrainNotLiftedKeepsTheSlot(t *testing.T) {
	d := &failLift{}
	g := groupkit.NewVia(t, "drainliftfail", d)
	c := g.Srv.Client()
	drainedOnV1(t, g, map[string]string{"web-1": "web", "api-1": "api"})
	d.on.Store(true)
	v2 := commitDrained(t, g.Store, g.Name, "v2", "web", "api")
	testkit.Steady(t, 4*time.Second, 20*time.Millisecond, func() error {
		h, err := g.Holders()
		if err != nil {
			return nil
		}
		_, claimed := h.ClaimOf("n1")
		if m := consulMaintenance(t, c); len(m) != 0 && !claimed && len(h.Holding) == 0 {
			return fmt.Errorf("no slot held while services are in maintenance: %q", m)
		}
		return nil
	})
	d.on.Store(false)
	waitNode(t, g.Store, g.Name, "n1", "converged on v2 once Consul answers", func(n *coordinator.NodeState) bool {
		return n.SHA == v2 && n.State == coordinator.StateConverged
	})
}
