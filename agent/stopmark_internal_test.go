package agent

import (
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// An agent whose start-up probe of its right to write the stop index gets
// no answer (its Consul agent not up yet) says in its records that it
// keeps no index until an answer comes: said otherwise, a stop of its
// under a policy from before the index would be missed by the grants that
// trust the index, for up to coordinator's fullReadEvery.
func TestUnansweredStopIndexProbeLeavesRecordsUnindexed(t *testing.T) {
	dead, err := api.NewClient(&api.Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	r := &nodeRecord{store: coordinator.NewStore(dead, ""), group: "web", node: "n1", log: hclog.NewNullLogger()}
	r.probeStopIndex(t.Context())
	if n := r.state("", "", coordinator.StateWaiting, ""); n.StopIndex {
		t.Fatal("record says stop_index after a probe that got no answer; want it off until one comes")
	}
	if r.resolveUnsure(t.Context()) {
		t.Fatal("resolveUnsure reported an answer from an unreachable Consul")
	}
	r.store = coordinator.NewStore(consultest.NewDev(t).Client(), "")
	if !r.resolveUnsure(t.Context()) {
		t.Fatal("resolveUnsure got no answer from a running Consul")
	}
	if n := r.state("", "", coordinator.StateWaiting, ""); !n.StopIndex {
		t.Fatal("record still says no stop_index once the token was found to may write it")
	}
}

// Once the answer comes, the record in KV, written without stop_index
// while the agent was unsure, is written again at the next look:
// SamePublished leaves StopIndex out, and an idle node's record would
// otherwise keep saying no index until something else in it changes, each
// grant meanwhile reading every record of the group.
func TestAnsweredStopIndexProbeWritesTheRecordAgain(t *testing.T) {
	r := &nodeRecord{group: "web", node: "n1", log: hclog.NewNullLogger(), written: func() {}, unindexed: true, unsure: true}
	kv := r.state("a", "a", coordinator.StateConverged, "")
	r.published(t.Context(), kv)
	r.mu.Lock()
	r.unindexed, r.unsure = false, false // resolveUnsure's answer: it may
	r.mu.Unlock()
	if n := r.state("a", "a", coordinator.StateConverged, ""); !n.StopIndex || !r.differs(n) {
		t.Fatalf("record with stop_index %v not written again over the one without (differs %v)", n.StopIndex, r.differs(n))
	}
}
