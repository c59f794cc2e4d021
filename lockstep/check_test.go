package lockstep

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

var errHealthFailing = errors.New("test: health failing")

// Writes.Check is asked right before the grant transaction, not while the
// slot is full: a condition that fails while the contender heads the line,
// waiting on a full slot, stops the grant once the slot frees; one that
// holds lets it through. What it reads here is a key the test sets after
// the contender is in line, standing for a Consul check's health.
func TestAcquireChecksRightBeforeTheGrant(t *testing.T) {
	for _, tc := range []struct {
		name    string
		health  string // set while the contender heads the line
		wantErr error
	}{
		{"passing at the grant", "passing", nil},
		{"critical at the grant", "critical", errHealthFailing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, g, ctx := committed(t, "check", 1, 30*time.Second)
			const healthKey = "rollagent/g/health"
			setHealth := func(v string) {
				if _, err := c.KV().Put(&api.KVPair{Key: healthKey, Value: []byte(v)}, nil); err != nil {
					t.Fatal(err)
				}
			}
			setHealth("passing")
			first, err := newSem(t, c, "first").Acquire(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			var asked atomic.Int32
			check := func(ctx context.Context) error {
				asked.Add(1)
				p, _, err := c.KV().Get(healthKey, (&api.QueryOptions{}).WithContext(ctx))
				if err != nil {
					return err
				}
				if string(p.Value) != "passing" {
					return errHealthFailing
				}
				return nil
			}
			m := newSem(t, c, "second")
			type result struct {
				h   *Hold
				err error
			}
			got := make(chan result, 1)
			go func() {
				h, err := m.AcquireWith(ctx, g, Writes{Check: check, Grant: func() api.TxnOps {
					return api.TxnOps{setOp("rollagent/g/step", "second")}
				}})
				got <- result{h, err}
			}()
			waitInLine(t, c, 1, "the second in line, its slot full")
			if n := asked.Load(); n != 0 {
				t.Fatalf("Check was asked %d time(s) while the slot was full", n)
			}
			setHealth(tc.health)
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if !errors.Is(r.err, tc.wantErr) {
				t.Fatalf("Acquire: %v, want %v", r.err, tc.wantErr)
			}
			if asked.Load() == 0 {
				t.Fatal("Check was never asked")
			}
			step, _, err := c.KV().Get("rollagent/g/step", nil)
			if err != nil {
				t.Fatal(err)
			}
			h := readHolders(t, c)
			if tc.wantErr != nil {
				if r.h != nil || step != nil || len(h.Holding)+len(h.Waiting) > 0 {
					t.Fatalf("a grant that Check refused: hold %v, step %+v, holding %v, waiting %v", r.h, step, h.Holding, h.Waiting)
				}
				return
			}
			if step == nil || !h.Live(m.s.ID()) {
				t.Fatalf("no grant with Check passing: step %+v, holding %v", step, h.Holding)
			}
			if err := r.h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
