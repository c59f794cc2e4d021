package coordinator

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/lockstep"
)

// PassedFence names, under a CANCEL, the nodes whose record a fence wrote
// before the CANCEL and which still hold their slot, and the nodes
// verifying the cancelled SHA; never a node only granted.
func TestPassedFence(t *testing.T) {
	const cancelIndex = 100
	k, err := NewKeys(DefaultPrefix, "web")
	if err != nil {
		t.Fatal(err)
	}
	replacing := func(fenced string) NodeState {
		return NodeState{Node: "n1", SHA: shaOld, Desired: shaNew, State: StateReplacing, Fenced: fenced}
	}
	verifying := NodeState{Node: "n1", SHA: shaNew, Desired: shaNew, State: StateVerifying}
	holding := &lockstep.Holders{Holding: map[string]lockstep.Entry{"s1": {Name: "n1", State: "holding"}}}
	orphaned := &lockstep.Holders{Claims: map[string]lockstep.Claim{"n1": {Session: "dead", Until: ago(-time.Minute)}}}
	lost := &lockstep.Holders{Claims: map[string]lockstep.Claim{"n1": {Session: "dead", Until: ago(time.Minute), Lost: true}}}
	tests := []struct {
		name      string
		node      NodeState
		index     uint64 // the node record's ModifyIndex
		holders   *lockstep.Holders
		noCancel  bool
		wantFound bool
	}{
		{name: "fenced before the CANCEL, holding", node: replacing("set old container aside"), index: cancelIndex - 1, holders: holding, wantFound: true},
		{name: "fenced, its agent gone mid-step with its claim", node: replacing("start new container"), index: cancelIndex - 1, holders: orphaned, wantFound: true},
		{name: "granted only: the grant's record names no step", node: replacing(""), index: cancelIndex - 1, holders: holding},
		{name: "record written after the CANCEL", node: replacing("start new container"), index: cancelIndex + 1, holders: holding},
		{name: "verifying the cancelled SHA, record written after the CANCEL", node: verifying, index: cancelIndex + 1, holders: holding, wantFound: true},
		{name: "fenced, slot released since", node: replacing("set old container aside"), index: cancelIndex - 1, holders: &lockstep.Holders{}},
		{name: "fenced, claim reported lost", node: replacing("set old container aside"), index: cancelIndex - 1, holders: lost},
		{name: "no CANCEL", node: replacing("set old container aside"), index: cancelIndex - 1, holders: holding, noCancel: true},
		{name: "fenced toward another SHA", node: NodeState{Node: "n1", SHA: shaOld, Desired: shaOld, State: StateReplacing, Fenced: "swap"},
			index: cancelIndex - 1, holders: holding},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pairs := api.KVPairs{
				pairOf(t, k.Desired(), Desired{SHA: shaNew, CommittedAt: ago(time.Hour)}, 1),
				pairOf(t, k.Node("n1"), tt.node, tt.index),
			}
			if !tt.noCancel {
				pairs = append(pairs, pairOf(t, k.Cancel(shaNew), Cancel{SHA: shaNew, At: ago(time.Second)}, cancelIndex))
			}
			g := Parse(k, "web", pairs, 200)
			g.Holders = tt.holders
			got := g.PassedFence()
			if found := slices.ContainsFunc(got, func(n NodeState) bool { return n.Node == "n1" }); found != tt.wantFound {
				t.Fatalf("PassedFence() = %+v, want n1 listed: %v", got, tt.wantFound)
			}
			if got == nil {
				t.Fatal("PassedFence() = nil, want a list")
			}
		})
	}
}

func pairOf(t *testing.T, key string, v any, index uint64) *api.KVPair {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return &api.KVPair{Key: key, Value: b, CreateIndex: index, ModifyIndex: index}
}
