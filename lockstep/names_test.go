package lockstep

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

func TestClassifyKey(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want KeyKind
	}{
		{".holders", KeyRecord},
		{".tail", KeyTail},
		{".holders/n1/s1", KeyEntry},
		{"c/n1/s1", KeyEntry},
		{".holders/s1", KeyLegacyEntry},
		{".holders/.slots/0", KeySlot},
		{".holders/.slots/12", KeySlot},
		{".holders/.slots/012", KeyEntry}, // no slot: filed under ".slots", no node's name
		{".holders/.slots/x", KeyEntry},
		{"c/s1", KeyLegacyEntry},
		{"c/", KeyUnexpected},
		{"c/n1/", KeyUnexpected},
		{"c//s1", KeyUnexpected},
		{"c/../s1", KeyUnexpected},
		{"c/..", KeyUnexpected},
		{"c/n1/s1/x", KeyUnexpected},
		{".holders/", KeyUnexpected},
		{".holdersx", KeyUnexpected},
		{".tailx", KeyUnexpected},
		{"junk", KeyUnexpected},
		{"x/n1/s1", KeyUnexpected},
	} {
		t.Run(tc.rel, func(t *testing.T) {
			if got := ClassifyKey(tc.rel); got != tc.want {
				t.Fatalf("ClassifyKey(%q) = %d, want %d", tc.rel, got, tc.want)
			}
		})
	}
}

// A name is one segment of a key, so that a policy granting <dir>/<name>/
// grants that name alone.
func TestNewRefusesANameThatIsNoSegment(t *testing.T) {
	s := &Session{id: "s1"}
	for _, name := range []string{"n1/x", "..", ".", "/"} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(nil, s, Options{Prefix: testPrefix, Name: name}); !errors.Is(err, ErrBadName) {
				t.Fatalf("New with name %q: %v, want ErrBadName", name, err)
			}
		})
	}
	m, err := New(nil, s, Options{Prefix: testPrefix})
	if err != nil || m.key != testPrefix+"/c/s1/s1" || m.hkey != testPrefix+"/.holders/s1/s1" {
		t.Fatalf("New with no name: %v, keys %q %q", err, m.key, m.hkey)
	}
}

// Which holder keys count, and for which name: the name a key is filed
// under wins over the record's, as only that name's token may write there;
// a key locked by another session than the one it names counts for none.
func TestParseSnapshotNames(t *testing.T) {
	const p = "slot/"
	rec, _ := json.Marshal(holders{Holders: map[string]Entry{"s1": {Name: "n9", State: "holding"}}})
	for _, tc := range []struct {
		name string
		keys api.KVPairs
		want map[string]string // session -> name of the live holders
	}{
		{"filed under its name", api.KVPairs{{Key: p + ".holders/n1/s1", Session: "s1"}}, map[string]string{"s1": "n1"}},
		{"the record names another", api.KVPairs{{Key: p + ".holders/n2/s1", Session: "s1"}}, map[string]string{"s1": "n2"}},
		{"an older version's, named by the record", api.KVPairs{{Key: p + ".holders/s1", Session: "s1"}}, map[string]string{"s1": "n9"}},
		{"locked by another session", api.KVPairs{{Key: p + ".holders/n1/s1", Session: "s2"}}, map[string]string{}},
		{"not locked", api.KVPairs{{Key: p + ".holders/n1/s1"}}, map[string]string{}},
		{"too deep", api.KVPairs{{Key: p + ".holders/n1/x/s1", Session: "s1"}}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pairs := append(api.KVPairs{{Key: p + holdersKey, Value: rec}}, tc.keys...)
			s := parseSnapshot(p, pairs, 1)
			got := map[string]string{}
			for id, e := range s.live {
				got[id] = e.Name
			}
			if len(got) != len(tc.want) {
				t.Fatalf("live %v, want %v", got, tc.want)
			}
			for id, n := range tc.want {
				if got[id] != n {
					t.Fatalf("live %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// A contender of an older version, named by session alone, keeps its
// place in line, and the names of both kinds are told.
func TestAnOlderContenderKeepsItsPlace(t *testing.T) {
	const p = "slot/"
	pairs := api.KVPairs{
		{Key: p + "c/old", Session: "old", CreateIndex: 5, Value: []byte(`{"name":"n0","state":"waiting"}`)},
		{Key: p + "c/n1/s1", Session: "s1", CreateIndex: 7, Value: []byte(`{"name":"junk"}`)},
		{Key: p + "c/n2/s2", Session: "s2", CreateIndex: 6},
	}
	s := parseSnapshot(p, pairs, 1)
	ahead, ok := s.ahead("s1")
	if !ok || len(ahead) != 2 || ahead[0].Session != "old" || ahead[1].Session != "s2" {
		t.Fatalf("ahead of s1: %+v, %v; want old, then s2", ahead, ok)
	}
	names := ParseHolders(p, pairs).Names()
	if names["old"] != "n0" || names["s1"] != "n1" || names["s2"] != "n2" {
		t.Fatalf("names %v", names)
	}
}

// Every key a contender writes, but the holders record and the line's
// tail that all share, is filed under its name: waiting, holding, and
// after a reclaim.
func TestKeysAreFiledUnderTheName(t *testing.T) {
	c, g, ctx := committed(t, "sha-names", 1, time.Minute)
	g.Lease = time.Minute
	check := func(when string) {
		t.Helper()
		keys, _, err := c.KV().Keys(testPrefix+"/", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			rel := strings.TrimPrefix(k, testPrefix+"/")
			if rel == ".holders" || rel == ".tail" || ClassifyKey(rel) == KeySlot {
				continue // shared by every name
			}
			if !strings.HasPrefix(rel, "c/n1/") && !strings.HasPrefix(rel, ".holders/n1/") &&
				!strings.HasPrefix(rel, "c/n2/") && !strings.HasPrefix(rel, ".holders/n2/") {
				t.Errorf("%s: %s is filed under no contender's name", when, k)
			}
		}
	}
	m1 := newSem(t, c, "n1")
	h, err := m1.Acquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	m2 := newSem(t, c, "n2")
	got := acquireAsync(t, ctx, m2, g)
	waitInLine(t, c, 1, "n2 in line")
	check("n1 holds, n2 waits")
	h.Drop()
	endSession(t, m1.s) // as a process killed mid-step
	m1b := newSem(t, c, "n1")
	if h, err = m1b.Reclaim(ctx, g, ""); err != nil {
		t.Fatal(err)
	}
	check("n1 reclaimed")
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h2 := <-got
	if h2 == nil {
		t.FailNow()
	}
	check("n2 holds")
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A holder of an older version, whose keys are named by session alone,
// counts: no slot is granted past it, and the next is granted once it
// goes.
func TestAnOlderHolderCounts(t *testing.T) {
	c, g, ctx := committed(t, "sha-old", 1, time.Minute)
	old, _, err := c.Session().Create(&api.SessionEntry{Behavior: api.SessionBehaviorDelete, LockDelay: time.Millisecond, TTL: "60s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Session().Destroy(old, nil) })
	entry := []byte(`{"name":"n0","state":"holding","since":"2026-01-01T00:00:00Z"}`)
	rec, _ := json.Marshal(holders{Holders: map[string]Entry{old: {Name: "n0", State: "holding"}}})
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: HoldersKey(testPrefix), Value: rec}},
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: testPrefix + "/.holders/" + old, Value: entry, Session: old}},
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: testPrefix + "/c/" + old, Value: entry, Session: old}},
	}
	if ok, resp, _, err := c.Txn().Txn(ops, nil); err != nil || !ok {
		t.Fatalf("the older holder's keys: %v %+v", err, resp)
	}
	got := acquireAsync(t, ctx, newSem(t, c, "n1"), g)
	select {
	case <-got:
		t.Fatal("granted past a holder of an older version")
	case <-time.After(time.Second):
	}
	if _, err := c.Session().Destroy(old, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h == nil {
			t.FailNow()
		}
		_ = h.Release(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("not granted within 20s of the older holder's end")
	}
}
