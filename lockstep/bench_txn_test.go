package lockstep

// BenchmarkLockstepSlotTxns counts the grant and release transactions per
// contender at K = 10 and 50, with claims (Gate.Lease) as agents take
// them: 4K contenders join at once and each holds 5-25 ms, so releases
// and grants overlap all the time. With one slot key per holder, a grant
// or a release races nothing and each takes one transaction (issue 30:
// at most 1.05 of each per node). Run it with the others:
//
//	go test -run '^$' -bench . -benchtime 1x ./lockstep/

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// slotTxnTarget is issue 30's bound on grant and release transactions
// per node.
const slotTxnTarget = 1.05

func BenchmarkLockstepSlotTxns(b *testing.B) {
	for _, k := range []int{10, 50} {
		b.Run(fmt.Sprintf("K%d", k), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				// A dev agent of its own, the round's keys alone; past the
				// cap of 200 connections per client IP, as lockbench lifts it.
				c := consultest.New(b, consultest.Options{HCL: `limits { http_max_conns_per_client = 4096 }`}).Client()
				g := commit(b, c, fmt.Sprintf("txns-%d-%d", k, i), k)
				g.Lease = time.Minute
				grants, releases := slotTxnRound(b, c, g, 4*k)
				b.ReportMetric(grants, "grant-txn/node")
				b.ReportMetric(releases, "release-txn/node")
				b.Logf("K=%d, %d contenders: %.3f grant and %.3f release transactions per node (target ≤ %.2f)", k, 4*k, grants, releases, slotTxnTarget)
				if grants > slotTxnTarget || releases > slotTxnTarget {
					b.Errorf("over the target of %.2f transactions per node", slotTxnTarget)
				}
			}
		})
	}
}

// slotTxnRound runs n contenders through one Acquire and Release each and
// returns the grant and release transactions sent, per contender.
func slotTxnRound(b *testing.B, c *api.Client, g Gate, n int) (grants, releases float64) {
	ctx := ctxFor(b, 5*time.Minute)
	sems := make([]*Semaphore, n)
	for i := range sems {
		sems[i] = newSem(b, c, name(i))
	}
	g0, r0 := txnCount.grants.Load(), txnCount.releases.Load()
	var wg sync.WaitGroup
	for _, m := range sems {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := m.Acquire(ctx, g)
			if err != nil {
				b.Errorf("%s: %v", m.opts.Name, err)
				return
			}
			time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
			if err := h.Release(context.WithoutCancel(ctx)); err != nil {
				b.Errorf("%s release: %v", m.opts.Name, err)
			}
		}()
	}
	wg.Wait()
	return float64(txnCount.grants.Load()-g0) / float64(n), float64(txnCount.releases.Load()-r0) / float64(n)
}
