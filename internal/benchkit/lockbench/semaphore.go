package lockbench

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// apiSemHandoff runs n in-process api.Semaphore contenders with limit 1,
// each with the session api.Semaphore makes for itself.
func apiSemHandoff(b *testing.B, srv *consultest.Server, n int) *result {
	c, ctr, closeIdle := countedClient(b, srv.HTTPAddr)
	defer closeIdle()
	return run(b, c, ctr, "api.Semaphore", "apisem", n, HoldTime, func(ctx context.Context, run string) ([]Hold, []error, time.Duration) {
		prefix := Key(run, "slot")
		return contend(ctx, n, func(ctx context.Context, _ int) (Hold, error) {
			return apiSemTurn(ctx, c, prefix)
		})
	})
}

// apiSemTurn acquires once, holds HoldTime and releases. Once ctx ends, a
// waiter gives up at its next wake (api.Semaphore has no context; its
// blocking queries wait up to 15s).
func apiSemTurn(ctx context.Context, c *api.Client, prefix string) (Hold, error) {
	var hd Hold
	sem, err := c.SemaphorePrefix(prefix, 1)
	if err != nil {
		return hd, err
	}
	lost, err := sem.Acquire(ctx.Done())
	if err != nil {
		return hd, err
	}
	if lost == nil {
		return hd, ctx.Err()
	}
	hd.Acq = time.Now()
	hd.Start = hd.Acq
	time.Sleep(HoldTime)
	hd.End = time.Now()
	return hd, sem.Release()
}
