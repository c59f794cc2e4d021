package agentbench

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/lockstep"
)

// groupSnap is the group's KV tree as one blocking read returned it.
type groupSnap struct {
	at    time.Time
	index uint64
	pairs map[string]*api.KVPair
	gs    *coordinator.GroupState
}

// dequeued says no contender waits in line.
func (s groupSnap) dequeued() bool { return s.gs.Holders == nil || len(s.gs.Holders.Waiting) == 0 }

// allIn says every node in ns publishes state.
func (s groupSnap) allIn(ns []string, state coordinator.NodeStatus) bool {
	n := 0
	for _, x := range s.gs.Nodes {
		if slices.Contains(ns, x.Node) && x.State == state {
			n++
		}
	}
	return n == len(ns)
}

func (s groupSnap) createIndex(key string) uint64 {
	if p := s.pairs[key]; p != nil {
		return p.CreateIndex
	}
	return 0
}

func (s groupSnap) modifyIndex(key string) uint64 {
	if p := s.pairs[key]; p != nil {
		return p.ModifyIndex
	}
	return 0
}

// groupWatch records every state of a group's KV tree, with the time a
// blocking query returned it, until stopped.
type groupWatch = benchkit.KVWatch[groupSnap]

// watchGroup reads the tree once, so that the watch starts from now, and
// then follows it with blocking queries; the bench's cleanup stops it.
func watchGroup(b *testing.B, c *api.Client, st *coordinator.Store, group string) *groupWatch {
	b.Helper()
	k, err := st.Keys(group)
	if err != nil {
		b.Fatal(err)
	}
	w := benchkit.WatchKV(b, c, k.Root(), 100*time.Millisecond, func(at time.Time, index uint64, pairs api.KVPairs) groupSnap {
		s := groupSnap{at: at, index: index, pairs: map[string]*api.KVPair{}, gs: coordinator.Parse(k, group, pairs, index)}
		for _, p := range pairs {
			s.pairs[p.Key] = p
		}
		if s.gs.Holders == nil {
			s.gs.Holders = &lockstep.Holders{}
		}
		return s
	})
	b.Cleanup(w.Stop)
	return w
}
