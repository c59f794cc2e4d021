package coordinator

import (
	"slices"
	"testing"
)

// No canary is a node that goes last (update.last): the canary stage would
// wait on it while it waits for the stage.
func TestCanaryPoolLeavesOutTheLastNodes(t *testing.T) {
	nodes := []NodeState{{Node: "m1", ConsulNode: "host1"}, {Node: "m2", ConsulNode: "host2"}, {Node: "m3"}}
	for _, tc := range []struct {
		name string
		last []string
		want []string
	}{
		{"no last check", nil, []string{"m1", "m2", "m3"}},
		{"the leader left out", []string{"host2"}, []string{"m1", "m3"}},
		{"a node with no known Consul node stays", []string{"host1", "host2"}, []string{"m3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := withoutLast([]string{"m1", "m2", "m3"}, nodes, tc.last); !slices.Equal(got, tc.want) {
				t.Fatalf("pool %v, want %v", got, tc.want)
			}
		})
	}
}
