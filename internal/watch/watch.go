// Package watch runs the blocking-query loops of rollagent: one place
// keeps the index the way Consul asks of its clients, and paces the tries
// after a failure.
package watch

import (
	"context"
	"time"

	"github.com/rollagent/rollagent/internal/retry"
)

// Index is the index a blocking query waits on, kept as Consul's
// blocking-query documentation asks: an answer's index that went backwards
// (a server restored from a snapshot, a new cluster) starts over from 0,
// which answers at once, rather than waiting for an index that may not come
// for a long time; and after an answer it is never 0 again, as a wait on 0
// does not block.
type Index struct{ v uint64 }

// From returns an Index that waits on v first.
func From(v uint64) Index { return Index{v: v} }

// Wait is the index to send.
func (i Index) Wait() uint64 { return i.v }

// Answered takes the index of an answer.
func (i *Index) Answered(last uint64) {
	if last < i.v {
		i.v = 0
		return
	}
	i.v = max(last, 1)
}

// Reset makes the next query answer at once.
func (i *Index) Reset() { i.v = 0 }

// Options tune Run.
type Options struct {
	// From is the index of the first query. Optional, defaults to 0: the
	// first query answers at once.
	From uint64
	// Until ends the watch, if it has not ended before. Optional, defaults
	// to never.
	Until time.Time
	// MinInterval spaces answered queries: a key that changes several
	// times a second is read at most this often. Optional, defaults to 0.
	MinInterval time.Duration
	// Backoff paces the tries after a failed query. Required.
	Backoff *retry.Backoff
	// ResetOnError makes the query after a failure answer at once, for a
	// Consul that may have come back with other indexes. Optional.
	ResetOnError bool
	// OnError is told of each failed query, but one that failed because
	// ctx ended, and of the pause before the next. Optional.
	OnError func(err error, retryIn time.Duration)
}

// Query asks Consul once, blocking while its index is still index, and
// returns the answer's index; done ends the watch.
type Query func(ctx context.Context, index uint64) (last uint64, done bool, err error)

// Run runs q until it is done, ctx ends or opts.Until passes. It returns
// whether q said it was done.
func Run(ctx context.Context, opts Options, q Query) bool {
	idx := From(opts.From)
	for ctx.Err() == nil && (opts.Until.IsZero() || time.Now().Before(opts.Until)) {
		last, done, err := q(ctx, idx.Wait())
		if err != nil && ctx.Err() != nil {
			return false
		}
		if err != nil {
			d := opts.Backoff.Next()
			if opts.OnError != nil {
				opts.OnError(err, d)
			}
			if opts.ResetOnError {
				idx.Reset()
			}
			retry.Sleep(ctx, d)
			continue
		}
		opts.Backoff.Reset()
		if done {
			return true
		}
		idx.Answered(last)
		if opts.MinInterval > 0 {
			retry.Sleep(ctx, opts.MinInterval)
		}
	}
	return false
}
