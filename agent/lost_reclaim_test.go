package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// Issue 25, leftovers: n1, at the head of the line, judges n2's orphaned
// claim lost, and n2's agent comes back and reclaims its slot before n1's
// write lands. A failure is counted only for a claim actually marked lost:
// n2, which reclaimed, is charged nothing (max_failures=1, so a charge
// would pause the rollout), and n1 waits for n2's release as for any
// holder. A node that does not come back is charged once, with its mark.
// Before, reportLost recorded the failure and only then marked the claim,
// whose mark a reclaim in between turned into a no-op: n2 kept a failure
// for a step it did not lose, and the rollout paused.
func TestLostReportSparesANodeThatReclaims(t *testing.T) {
	srv := consultest.NewDev(t)
	for i, reclaim := range []bool{true, false} {
		name := map[bool]string{true: "n2 reclaims between the judgement and the write", false: "n2 not back"}[reclaim]
		t.Run(name, func(t *testing.T) {
			g := groupkit.On(t, srv, fmt.Sprintf("lostreclaim%d", i))
			st, group, k := g.Store, g.Name, g.Keys
			x := commitRecording(t, st, group, "x", "")
			gs := readGroup(t, st, group)
			note := coordinator.ClaimNote(gs.Desired)
			putExpiredClaim(t, srv.Client(), k, "n2", note, time.Now())
			n2 := slotSemaphore(t, srv.Client(), k, "n2") // n2's agent back
			gate := lockstep.Gate{DesiredKey: k.Desired(), DesiredIndex: gs.DesiredPair.ModifyIndex, Limit: 1, Lease: time.Hour}

			var once sync.Once
			hooked := make(chan *lockstep.Hold, 1)
			hook := func() {
				once.Do(func() {
					var h *lockstep.Hold
					if reclaim {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						var err error
						if h, err = n2.Reclaim(ctx, gate, note); err != nil {
							t.Errorf("n2's reclaim: %v", err)
						}
					}
					hooked <- h
				})
			}
			startAgentWith(t, agent.WithBeforeLostMark(agent.Config{Group: group, Node: "n1", Store: st,
				Runtime: &recordingRuntime{}, Resync: time.Hour}, hook))
			var held *lockstep.Hold
			select {
			case held = <-hooked:
			case <-time.After(time.Minute):
				t.Fatal("n1 never reported n2 lost")
			}
			if !reclaim {
				g.WaitFor(time.Minute, "n2 marked lost and charged", func() bool {
					gs = readGroup(t, st, group)
					c, ok := gs.Holders.ClaimOf("n2")
					return ok && c.Lost && len(gs.Failures) > 0
				})
				if len(gs.Failures) != 1 || gs.Failures[0].Node != "n2" || gs.Failures[0].SHA != x || gs.Pause == nil {
					t.Fatalf("want n2's one failure on x, and the rollout paused: failures %+v, pause %+v", gs.Failures, gs.Pause)
				}
				return
			}
			if held == nil {
				t.Fatal("n2 did not reclaim its slot")
			}
			g.WaitFor(time.Minute, "n1 in line behind n2's reclaimed slot, or n2 charged", func() bool {
				gs = readGroup(t, st, group)
				return len(gs.Failures) > 0 || gs.Pause != nil || (len(gs.Holders.Waiting) == 1 && !gs.Holders.Claims["n2"].Lost)
			})
			noFailureCounted(t, st, group, "a node that reclaimed its slot before it was marked lost")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			waitNode(t, st, group, "n1", "converged on x", converged(x))
			noFailureCounted(t, st, group, "a node that reclaimed its slot before it was marked lost")
		})
	}
}
