package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// Review of acca91b: the lost path (MarkLostWith + LostOps) against a
// second reporter, and against an ordinary failure that lands between the
// lost path's read and its transaction. Each failure counts once, and
// failure_action fires once, at max_failures.
func TestReviewLostTxnInterleavings(t *testing.T) {
	srv := consultest.NewDev(t)
	for i, tt := range []struct {
		name       string
		max        int
		between    string // "reporter": another reporter's whole report; else the node of an ordinary failure
		failures   int
		pausedWith int // 0: no pause
	}{
		{"a second reporter's report lands first", 1, "reporter", 1, 1},
		{"another node's ordinary failure, the max-th with n2's", 2, "n3", 2, 2},
		{"n2's own ordinary failure", 2, "n2", 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := groupkit.On(t, srv, fmt.Sprintf("lostreview%d", i))
			st, group, k := g.Store, g.Name, g.Keys
			js := fmt.Sprintf(`{"name":%q,"container":{"image":"example.com/app:x"},"update":{"min_healthy_time":"1s","failure_action":"pause","max_failures":%d}}`, group, tt.max)
			s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "spec")
			if err != nil {
				t.Fatal(err)
			}
			x := commitSpec(t, st, group, "x", s)
			gs := readGroup(t, st, group)
			note := coordinator.ClaimNote(gs.Desired)
			putExpiredClaim(t, srv.Client(), k, "n2", note, time.Now())
			hs, err := lockstep.ReadHolders(srv.Client(), k.Slot(), nil)
			if err != nil {
				t.Fatal(err)
			}
			judged, _ := hs.ClaimOf("n2")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			report := func(m *lockstep.Semaphore, writer string, between func()) (bool, error) {
				tries := 0
				return m.MarkLostWith(ctx, "n2", judged, func(ctx context.Context) (api.TxnOps, error) {
					ops, _, err := st.LostOps(ctx, group, writer, "n2", judged.Note, judged.Since, "n2 lost")
					if tries++; tries == 1 && between != nil {
						between()
					}
					return ops, err
				})
			}
			n1 := slotSemaphore(t, srv.Client(), k, "n1")
			var between func()
			if tt.between == "reporter" {
				n3 := slotSemaphore(t, srv.Client(), k, "n3")
				between = func() {
					if marked, err := report(n3, "n3", nil); err != nil || !marked {
						t.Errorf("the other reporter: marked %v, %v", marked, err)
					}
				}
			} else {
				between = func() {
					if _, err := st.RecordFailureBy(ctx, group, tt.between, tt.between, x, "failed"); err != nil {
						t.Errorf("ordinary failure: %v", err)
					}
				}
			}
			marked, err := report(n1, "n1", between)
			if err != nil {
				t.Fatal(err)
			}
			if want := tt.between != "reporter"; marked != want {
				t.Fatalf("n1 marked %v, want %v", marked, want)
			}
			gs = readGroup(t, st, group)
			c, _ := gs.Holders.ClaimOf("n2")
			if !c.Lost {
				t.Fatalf("n2's claim not marked lost: %+v", c)
			}
			if len(gs.Failures) != tt.failures {
				t.Fatalf("failures %+v, want %d", gs.Failures, tt.failures)
			}
			p, _, err := srv.Client().KV().Get(k.FailCount(x), nil)
			if err != nil || p == nil {
				t.Fatalf("failcount: %v %v", p, err)
			}
			var fc coordinator.FailCount
			if err := json.Unmarshal(p.Value, &fc); err != nil || fc.Failures != tt.failures {
				t.Fatalf("failcount %s (%v), want %d", p.Value, err, tt.failures)
			}
			if tt.pausedWith == 0 {
				if gs.Pause != nil {
					t.Fatalf("paused: %+v", gs.Pause)
				}
			} else if gs.Pause == nil || gs.Pause.Failures != tt.pausedWith {
				t.Fatalf("pause %+v, want one at %d failures", gs.Pause, tt.pausedWith)
			}
			log, err := st.Events(ctx, group)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[coordinator.EventKind]int{}
			for _, e := range log.Events {
				kinds[e.Kind]++
			}
			if kinds[coordinator.EventFailure] != tt.failures || kinds[coordinator.EventPause] != min(tt.pausedWith, 1) {
				t.Fatalf("events %v, want %d failure(s) and %d pause(s)", kinds, tt.failures, min(tt.pausedWith, 1))
			}
		})
	}
}

// slotSemaphore is a contender named name on k's slot, with a session
// of its own.
func slotSemaphore(t *testing.T, c *api.Client, k coordinator.Keys, name string) *lockstep.Semaphore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := lockstep.NewSession(ctx, c, lockstep.SessionOptions{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	m, err := lockstep.New(c, s, lockstep.Options{Prefix: k.Slot(), Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
