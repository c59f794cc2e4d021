package agentbench

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
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
type groupWatch struct {
	mu     sync.Mutex
	all    []groupSnap
	cancel context.CancelFunc
	done   chan struct{}
}

// watchGroup reads the tree once, so that the watch starts from now, and
// then follows it with blocking queries.
func watchGroup(b *testing.B, c *api.Client, st *coordinator.Store, group string) *groupWatch {
	b.Helper()
	k, err := st.Keys(group)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &groupWatch{cancel: cancel, done: make(chan struct{})}
	read := func(index uint64) (uint64, error) {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: time.Minute}).WithContext(ctx)
		pairs, meta, err := c.KV().List(k.Root(), q)
		if err != nil {
			return index, err
		}
		s := groupSnap{at: time.Now(), index: meta.LastIndex, pairs: map[string]*api.KVPair{},
			gs: coordinator.Parse(k, group, pairs, meta.LastIndex)}
		for _, p := range pairs {
			s.pairs[p.Key] = p
		}
		if s.gs.Holders == nil {
			s.gs.Holders = &lockstep.Holders{}
		}
		w.mu.Lock()
		w.all = append(w.all, s)
		w.mu.Unlock()
		return meta.LastIndex, nil
	}
	index, err := read(0)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			if next, err := read(index); err == nil {
				index = next
			} else if ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	b.Cleanup(w.stop)
	return w
}

func (w *groupWatch) stop() { w.cancel(); <-w.done }

func (w *groupWatch) snaps() []groupSnap {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.all)
}

func (w *groupWatch) last() groupSnap {
	s := w.snaps()
	return s[len(s)-1]
}

// first returns the earliest snapshot for which cond holds, or nil.
func (w *groupWatch) first(cond func(groupSnap) bool) *groupSnap {
	for _, s := range w.snaps() {
		if cond(s) {
			return &s
		}
	}
	return nil
}
