package benchkit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	pace "github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/watch"
)

// KVWatch records every state of a KV prefix that a blocking List
// returned, as a snapshot S, until stopped: the fleet and agent benches
// time what they measure by when a read first showed it.
type KVWatch[S any] struct {
	mu     sync.Mutex
	all    []S
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// WatchKV lists prefix once, so that the watch starts from now, and then
// follows it with blocking Lists. snap makes the snapshot of one answer;
// at is when the List returned. retry is the pause after a failed read
// while the watch runs (0: read again at once).
func WatchKV[S any](tb testing.TB, c *api.Client, prefix string, retry time.Duration,
	snap func(at time.Time, index uint64, pairs api.KVPairs) S) *KVWatch[S] {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &KVWatch[S]{cancel: cancel, done: make(chan struct{})}
	read := func(index uint64) (uint64, error) {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: time.Minute}).WithContext(ctx)
		pairs, meta, err := c.KV().List(prefix, q)
		if err != nil {
			return index, err
		}
		s := snap(time.Now(), meta.LastIndex, pairs)
		w.mu.Lock()
		w.all = append(w.all, s)
		w.mu.Unlock()
		return meta.LastIndex, nil
	}
	index, err := read(0)
	if err != nil {
		tb.Fatal(err)
	}
	// A failed read is tried again after retry, the same pause each time.
	opts := watch.Options{From: index, Backoff: pace.NewSteady(retry, retry)}
	go func() {
		defer close(w.done)
		watch.Run(ctx, opts, func(_ context.Context, index uint64) (uint64, bool, error) {
			last, err := read(index)
			return last, false, err
		})
	}()
	return w
}

// Stop ends the watch and waits for its last read; it may be called again.
func (w *KVWatch[S]) Stop() {
	w.once.Do(func() {
		w.cancel()
		<-w.done
	})
}

// Snaps is a copy of every snapshot so far, oldest first.
func (w *KVWatch[S]) Snaps() []S {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.all)
}

// Last is the latest snapshot; the first read made one.
func (w *KVWatch[S]) Last() S {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all[len(w.all)-1]
}

// First is the earliest snapshot for which ok holds, or nil.
func (w *KVWatch[S]) First(ok func(S) bool) *S {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.all {
		if ok(s) {
			return &s
		}
	}
	return nil
}
