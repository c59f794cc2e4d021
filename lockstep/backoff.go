package lockstep

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/internal/readlimit"
	pace "github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/watch"
)

// retry is the backoff of one loop after Consul errors: jittered, so that
// the fleet's retries spread out when Consul comes back after an outage.
type retry struct {
	b   *pace.Backoff
	log hclog.Logger
}

// retry starts the backoff of one of m's loops.
func (m *Semaphore) retry() *retry {
	return &retry{b: pace.New(retryMin, retryMax), log: m.log}
}

func (r *retry) reset() { r.b.Reset() }

// watchKey follows key with blocking queries from index from, retrying
// Consul errors with backoff, until seen, given each answer with its
// index, says it is done, or ctx ends: it returns whether seen was done.
func (m *Semaphore) watchKey(ctx context.Context, what, key string, from uint64, seen func(p *api.KVPair, last uint64) (next uint64, done bool)) bool {
	r := m.retry()
	onError := func(err error, in time.Duration) {
		r.log.Warn("consul error; retrying", "op", what, "in", in, "error", err)
	}
	opts := watch.Options{From: from, Backoff: r.b, OnError: onError}
	return watch.Run(ctx, opts, func(ctx context.Context, index uint64) (uint64, bool, error) {
		p, meta, err := m.c.KV().Get(key, m.blocking(ctx, index))
		var tl *readlimit.TooLargeError
		if errors.As(err, &tl) {
			// Over the bound the caller's ctx set (readlimit.With): no
			// key lockstep writes is, so it is seen as gone.
			next, done := seen(nil, 0)
			return next, done, nil
		}
		if err != nil {
			return 0, false, err
		}
		next, done := seen(p, meta.LastIndex)
		return next, done, nil
	})
}

// wait sleeps after a Consul error, or until ctx ends.
func (r *retry) wait(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	d := r.b.Next()
	r.log.Warn("consul error; retrying", "op", what, "in", d, "error", err)
	pace.Sleep(ctx, d)
}

// attempts runs once up to releaseAttempts times: again at once
// after a CAS race, after a Consul error with backoff; any other error, or
// ctx ending, ends it. It returns the last error, nil on success.
func (m *Semaphore) attempts(ctx context.Context, what string, once func() error) error {
	r := m.retry()
	var err error
	for i := 0; i < releaseAttempts; i++ {
		err = once()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case isConsulErr(err):
			r.wait(ctx, what, err)
		case !errors.Is(err, errRace):
			return err
		}
	}
	return err
}
