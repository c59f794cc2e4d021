package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/watch"
	"github.com/rollagent/rollagent/lockstep"
)

// followHolders reads group's holders (the record, the slot keys and the
// holder keys) with blocking queries until ctx ends, and gives seen each
// read, with when it returned. It returns once the first query has, so
// that what the test does next is seen.
func followHolders(ctx context.Context, t *testing.T, c *api.Client, group string, seen func(at time.Time, h *lockstep.Holders)) {
	t.Helper()
	k, err := coordinator.NewKeys(coordinator.DefaultPrefix, group)
	if err != nil {
		t.Fatal(err)
	}
	followPrefix(ctx, c, lockstep.HoldersKey(k.Slot()), func(at time.Time, ps api.KVPairs) {
		seen(at, lockstep.ParseHolders(k.Slot(), ps))
	})
}

// followPrefix lists the keys under prefix with blocking queries until ctx
// ends, and gives seen each answer, with when it returned: every change
// that lands a round trip after the one before. It returns once the first
// query has.
func followPrefix(ctx context.Context, c *api.Client, prefix string, seen func(at time.Time, ps api.KVPairs)) {
	ready := make(chan struct{})
	asked := false
	// A failed read is tried again 10ms later, keeping the index.
	opts := watch.Options{Backoff: retry.NewSteady(10*time.Millisecond, 10*time.Millisecond)}
	go watch.Run(ctx, opts, func(ctx context.Context, index uint64) (uint64, bool, error) {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx)
		ps, meta, err := c.KV().List(prefix, q)
		at := time.Now()
		if !asked {
			asked = true
			close(ready)
		}
		if err != nil {
			return 0, false, err
		}
		seen(at, ps)
		return meta.LastIndex, false, nil
	})
	<-ready
}

// followNode follows node's record in group k from now until the test
// ends, and returns every version seen so far: each write a round trip
// after the one before, a record the next write replaces at once too.
func followNode(t *testing.T, c *api.Client, k coordinator.Keys, node string) func() []coordinator.NodeState {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	var seen []coordinator.NodeState
	followPrefix(ctx, c, k.Node(node), func(_ time.Time, ps api.KVPairs) {
		for _, p := range ps {
			var n coordinator.NodeState
			if p.Key == k.Node(node) && json.Unmarshal(p.Value, &n) == nil {
				mu.Lock()
				seen = append(seen, n)
				mu.Unlock()
			}
		}
	})
	return func() []coordinator.NodeState {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}
