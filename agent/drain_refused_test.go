package agent_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// denyMaint passes every request on, but answers Consul's denial to each
// that puts a service into maintenance while deny is set, as Consul does
// for a token without service:write on it.
type denyMaint struct {
	next    testkit.Counter
	deny    atomic.Bool
	refused atomic.Int64
}

func (d *denyMaint) RoundTrip(r *http.Request) (*http.Response, error) {
	if d.deny.Load() && r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/agent/service/maintenance/") &&
		r.URL.Query().Get("enable") == "true" {
		d.refused.Add(1)
		return consulReply(r, http.StatusForbidden, "Permission denied: token with AccessorID 'test' lacks permission 'service:write'"), nil
	}
	return d.next.RoundTrip(r)
}

// A drain the local Consul agent refuses touched nothing: the node gives
// its slot back with why in its record, counts no failure, and tries again
// later, so that once the drain is allowed the rollout goes on. Kept
// under the slot, it would be tried again and again, holding the slot
// from every other node until progress_deadline.
func TestDrainRefusedReleasesTheSlot(t *testing.T) {
	deny := &denyMaint{}
	g := groupkit.NewVia(t, "drainrefused", deny)
	c := g.Srv.Client()
	v1, rt := drainedOnV1(t, g, map[string]string{"web-1": "web"})
	deny.deny.Store(true)
	v2 := commitDrained(t, g.Store, g.Name, "v2", "web")
	var n *coordinator.NodeState
	testkit.Eventually(t, 30*time.Second, "n1 failed to drain, its slot given back", func() bool {
		n = nodeState(t, g.Store, g.Name, "n1")
		h, err := g.Holders()
		if err != nil || n == nil || n.State != coordinator.StateFailed || !strings.Contains(n.Error, "could not be drained") {
			return false
		}
		_, claimed := h.ClaimOf("n1")
		return !claimed
	})
	if deny.refused.Load() == 0 || !strings.Contains(n.Error, "service:write") || n.SHA != v1 {
		t.Fatalf("n1's record %+v after %d refusals: want v1 running and the denial shown", n, deny.refused.Load())
	}
	noFailureCounted(t, g.Store, g.Name, "a refused drain")
	noDestructiveCalls(t, rt.Calls())
	if m := consulMaintenance(t, c); len(m) != 0 {
		t.Fatalf("maintenance after a refused drain: %q, want none", m)
	}
	deny.deny.Store(false)
	waitNode(t, g.Store, g.Name, "n1", "converged on v2 once the drain is allowed", func(n *coordinator.NodeState) bool {
		return n.SHA == v2 && n.State == coordinator.StateConverged
	})
	testkit.Eventually(t, 30*time.Second, "the drain lifted", func() bool { return len(consulMaintenance(t, c)) == 0 })
}
