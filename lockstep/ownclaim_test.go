package lockstep

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A contender's own claim that no longer counts (it was reported lost) is
// no pass past a full budget: at K = 1, with n2 holding, n1 waits,
// whatever its old claim says. Only a claim of its own that still counts
// is taken over by its grant, which then adds no node. (A claim past its
// Until counts until it is reported lost: no clock ends it.)
func TestOwnStaleClaimIsNoPassPastK(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost bool
	}{
		{"reported lost", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := consultest.NewDev(t)
			c := srv.Client()
			g := commit(t, c, "sha-own-claim", 1)
			g.Lease = time.Minute
			h2, err := newSem(t, c, "n2").Acquire(ctxFor(t, 10*time.Second), g)
			if err != nil {
				t.Fatal(err)
			}
			addClaim(t, c, "n1", Claim{Session: "0b7d6d2e-0000-4000-8000-00000000dead",
				Since: time.Now().Add(-3 * time.Minute), Until: time.Now().Add(-time.Minute), Lost: tc.lost})
			_, err = newSem(t, c, "n1").Acquire(ctxFor(t, 3*time.Second), g)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("n1 with a stale claim of its own, n2 holding at K = 1: Acquire = %v, want to wait", err)
			}
			if err := h2.Release(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// addClaim writes claim as name's into the holders record, CAS-ed.
func addClaim(t *testing.T, c *api.Client, name string, claim Claim) {
	t.Helper()
	p, _, err := c.KV().Get(HoldersKey(testPrefix), nil)
	if err != nil || p == nil {
		t.Fatalf("read the holders record: %v", err)
	}
	var rec holders
	if err := json.Unmarshal(p.Value, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Claims == nil {
		rec.Claims = map[string]Claim{}
	}
	rec.Claims[name] = claim
	if p.Value, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.KV().CAS(p, nil); err != nil || !ok {
		t.Fatalf("write the holders record: %v %v", ok, err)
	}
}
