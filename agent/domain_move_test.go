package agent_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// zoneMeta answers the local Consul agent's /v1/agent/self with the node
// meta "zone" set to zone: a host whose Consul agent restarted in another
// zone, without restarting the rollagent agent beside it.
type zoneMeta struct {
	next testkit.Counter
	mu   sync.Mutex
	zone string
}

func (z *zoneMeta) set(zone string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.zone = zone
}

func (z *zoneMeta) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := z.next.RoundTrip(r)
	if err != nil || r.URL.Path != "/v1/agent/self" || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	defer resp.Body.Close()
	var self map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&self); err != nil {
		return nil, err
	}
	z.mu.Lock()
	meta, _ := json.Marshal(map[string]string{"zone": z.zone})
	z.mu.Unlock()
	self["Meta"] = meta
	body, _ := json.Marshal(self)
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// A node's record follows its host's zone while its agent runs: a node
// converged and idle, whose Consul agent's meta moves it to another zone,
// records the new zone at its next look, so that once pruned from the
// catalog it counts there (Store.Domains), not in the zone it left.
func TestRecordFollowsZoneMove(t *testing.T) {
	z := &zoneMeta{zone: "a"}
	g := groupkit.NewVia(t, "zonemove", z)
	v1 := commitSpread(t, g.Store, g.Name, "v1")
	startAgentWith(t, agent.Config{Group: g.Name, Node: "n1", Store: g.Store, Runtime: &recordingRuntime{}, Resync: 200 * time.Millisecond})
	waitNode(t, g.Store, g.Name, "n1", "converged on v1 in zone a", func(n *coordinator.NodeState) bool {
		return n.SHA == v1 && n.State == coordinator.StateConverged && n.Domain == "zone=a"
	})
	z.set("b")
	waitNode(t, g.Store, g.Name, "n1", "recorded in zone b", func(n *coordinator.NodeState) bool {
		return n.SHA == v1 && n.State == coordinator.StateConverged && n.Domain == "zone=b"
	})
}
