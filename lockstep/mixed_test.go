package lockstep

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// olderRecord is the holders record in the shape agents from before slot
// keys decode and write it: no seq, and claims without anything added
// since. What it keeps is what an older agent counts and writes back.
type olderRecord struct {
	Holders  map[string]Entry      `json:"holders"`
	Last     *grant                `json:"last,omitempty"`
	Claims   map[string]olderClaim `json:"claims,omitempty"`
	Released uint64                `json:"released,omitempty"`
}

type olderClaim struct {
	Session string    `json:"session"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	Note    string    `json:"note,omitempty"`
	Lost    bool      `json:"lost,omitempty"`
	Domain  string    `json:"domain,omitempty"`
}

// olderCounted is what an older agent counts against K from pairs, a
// List of the holders at testPrefix: the record's claims not lost, and
// the names whose session locks their holder key. It does not read slot
// keys. A record it cannot read fails the test (Errorf: watchCounted
// calls it from a goroutine of its own).
func olderCounted(t testing.TB, pairs api.KVPairs) []string {
	t.Helper()
	names := map[string]bool{}
	for _, p := range pairs {
		rel := strings.TrimPrefix(p.Key, normPrefix(testPrefix))
		if rel == holdersKey {
			var rec olderRecord
			if err := json.Unmarshal(p.Value, &rec); err != nil {
				t.Errorf("an older agent cannot read the record %s: %v", p.Value, err) // from watchCounted's goroutine too
			}
			for n, c := range rec.Claims {
				if !c.Lost {
					names[n] = true
				}
			}
			continue
		}
		rest, ok := strings.CutPrefix(rel, holderPrefix)
		if name, session, found := strings.Cut(rest, "/"); ok && found && p.Session != "" && p.Session == session {
			names[name] = true
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	})
}

// views reads the holders at testPrefix once and returns what an older
// agent counts and what this version counts.
func views(t testing.TB, c *api.Client) (older, now []string) {
	t.Helper()
	ps, _, err := c.KV().List(HoldersKey(testPrefix), nil)
	if err != nil {
		t.Fatal(err)
	}
	return olderCounted(t, ps), ParseHolders(testPrefix, ps).Counted()
}

// wantViews fails the test unless, in one read, older agents count
// exactly older and this version exactly now (nil: none).
func wantViews(t testing.TB, c *api.Client, when string, older, now []string) {
	t.Helper()
	if o, n := views(t, c); !slices.Equal(o, older) || !slices.Equal(n, now) {
		t.Fatalf("%s: older agents count %v, this version %v; want %v and %v", when, o, n, older, now)
	}
}

// olderWrite rewrites the record as an older agent's grant or release
// does for the claims of other names: decoded into its shape, changed by
// edit, written back by CAS.
func olderWrite(t testing.TB, c *api.Client, edit func(*olderRecord)) {
	t.Helper()
	p, _, err := c.KV().Get(HoldersKey(testPrefix), nil)
	if err != nil || p == nil {
		t.Fatalf("holders record: %v", err)
	}
	var rec olderRecord
	if err := json.Unmarshal(p.Value, &rec); err != nil {
		t.Fatal(err)
	}
	edit(&rec)
	b, _ := json.Marshal(rec)
	if ok, _, err := c.KV().CAS(&api.KVPair{Key: p.Key, Value: b, ModifyIndex: p.ModifyIndex}, nil); err != nil || !ok {
		t.Fatalf("older agent's write: %v %v", ok, err)
	}
}

func recordClaims(t testing.TB, c *api.Client) map[string]olderClaim {
	t.Helper()
	p, _, err := c.KV().Get(HoldersKey(testPrefix), nil)
	if err != nil || p == nil {
		t.Fatalf("holders record: %v", err)
	}
	var rec olderRecord
	if err := json.Unmarshal(p.Value, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Claims
}

// A node of this version that dies mid-step leaves its claim in its slot
// key and a copy in the record, where an older agent at the head of the
// line counts it: at K = 1 it waits, as this version does.
func TestOlderAgentsCountADeadNodesClaim(t *testing.T) {
	c, g, ctx := committed(t, "sha-mixed-dead", 1, time.Minute)
	g.Lease = time.Minute
	dead := deadHolder(t, ctx, c, g, "n1")
	eventually(t, 10*time.Second, "n1's holder key gone with its session", func() bool {
		h, err := ReadHolders(c, testPrefix, nil)
		return err == nil && len(h.Holding) == 0
	})
	if cl := recordClaims(t, c)["n1"]; cl.Session != dead.s.ID() || cl.Lost {
		t.Fatalf("the record's copy of n1's claim: %+v", cl)
	}
	wantViews(t, c, "with n1 dead mid-step", []string{"n1"}, []string{"n1"})
}

// A release frees its slot key alone, naming the grant it frees: this
// version counts the record's copy no more (also after an older agent
// rewrote the record in its own shape), older agents count it until the
// next grant, which prunes it.
func TestReleasedCopyCountsNoMoreAndIsPruned(t *testing.T) {
	c, g, ctx := committed(t, "sha-mixed-release", 2, time.Minute)
	g.Lease = time.Minute
	h, err := newSem(t, c, "n1").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	id := h.slot.rec.Claim.id()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var sr slotRec
	if p := slotsOf(t, c)[h.slot.n]; p == nil || json.Unmarshal(p.Value, &sr) != nil || sr.Freed == nil ||
		sr.Freed.Session != id.Session || !sr.Freed.Since.Equal(id.Since) || sr.Name != "" {
		t.Fatalf("n1's freed slot key does not name its grant: %+v", sr)
	}
	wantViews(t, c, "after n1's release (older agents count the copy)", []string{"n1"}, nil)
	olderWrite(t, c, func(*olderRecord) {})
	if _, now := views(t, c); len(now) != 0 {
		t.Fatalf("after an older agent rewrote the record, this version counts %v", now)
	}
	h2, err := newSem(t, c, "n2").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if cl := recordClaims(t, c); len(cl) != 1 || cl["n2"].Session != h2.m.s.ID() {
		t.Fatalf("the grant after n1's release left the record's claims %v, want n2's alone", cl)
	}
	wantViews(t, c, "after n2's grant", []string{"n2"}, []string{"n2"})
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A claim marked lost by the head of the line is marked on its slot key
// and on the record's copy in one transaction: neither version counts it
// from then on, and the next grant keeps the mark in the copy.
func TestLostMarkOnASlotKeyHolds(t *testing.T) {
	c, g, ctx := committed(t, "sha-mixed-lost", 1, time.Minute)
	g.Lease = 2 * time.Second
	deadHolder(t, ctx, c, g, "n1")
	next := newSem(t, c, "n2")
	_, err := next.Acquire(ctx, g)
	var lost *LostError
	if !errors.As(err, &lost) {
		t.Fatalf("Acquire = %v, want a *LostError", err)
	}
	if err := next.MarkLost(ctx, lost.Name, lost.Claim); err != nil {
		t.Fatal(err)
	}
	wantViews(t, c, "after the lost mark", nil, nil)
	h, err := next.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if cl := recordClaims(t, c)["n1"]; !cl.Lost {
		t.Fatalf("the grant after the lost mark left n1's copy counting: %+v", cl)
	}
	wantViews(t, c, "after n2's grant", []string{"n2"}, []string{"n2"})
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An older head that marks the record's copy lost ends the claim for this
// version too: both copies are of one grant, which is lost once either
// says so.
func TestOlderLostMarkOnTheCopyHolds(t *testing.T) {
	c, g, ctx := committed(t, "sha-mixed-oldlost", 1, time.Minute)
	g.Lease = time.Minute
	deadHolder(t, ctx, c, g, "n1")
	olderWrite(t, c, func(r *olderRecord) {
		cl := r.Claims["n1"]
		cl.Lost = true
		r.Claims["n1"] = cl
		r.Released++
	})
	wantViews(t, c, "after an older head's lost mark", nil, nil)
	h, err := newSem(t, c, "n2").Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
