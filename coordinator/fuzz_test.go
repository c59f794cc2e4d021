package coordinator

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
)

// recordKinds are the KV value decoders, by the key they are read from.
var recordKinds = []struct {
	key string
	new func() interface{ check() error }
}{
	{"desired", func() interface{ check() error } { return &Desired{} }},
	{"history/x", func() interface{ check() error } { return &HistoryEntry{} }},
	{"cancel/x", func() interface{ check() error } { return &Cancel{} }},
	{"pause/x", func() interface{ check() error } { return &Pause{} }},
	{"failures/x/n1", func() interface{ check() error } { return &Failure{} }},
	{"nodes/n1", func() interface{ check() error } { return &NodeState{} }},
}

// FuzzDecodeRecord feeds any bytes to every record decoder. A value that
// is refused is refused with an error naming its key; a value that is
// accepted passes its checks and survives a round trip through JSON
// unchanged, so what an agent acts on is what was written.
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, kind := range recordKinds {
			v := kind.new()
			err := decode(kind.key, data, v)
			if err != nil {
				if !strings.HasPrefix(err.Error(), kind.key+": ") {
					t.Fatalf("%s: error does not name the key: %v", kind.key, err)
				}
				continue
			}
			if err := v.check(); err != nil {
				t.Fatalf("%s: decoded but fails its check: %v", kind.key, err)
			}
			again := kind.new()
			if err := decode(kind.key, mustJSON(v), again); err != nil {
				t.Fatalf("%s: re-encoding %q does not decode: %v", kind.key, mustJSON(v), err)
			}
			if !reflect.DeepEqual(plain(t, v), plain(t, again)) {
				t.Fatalf("%s: round trip changed the record:\n%s\n%s", kind.key, mustJSON(v), mustJSON(again))
			}
		}
	})
}

// plain is a record as generic JSON, which compares history specs by
// content rather than by their decoded pointers.
func plain(t *testing.T, v any) any {
	var out any
	if err := json.Unmarshal(mustJSON(v), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzParse puts any bytes at every key of a group's tree at once. Parse
// must not panic; every record it could not decode is a problem and
// nothing else; and the gate only opens on a readable desired SHA with its
// spec and no CANCEL or pause.
func FuzzParse(f *testing.F) {
	seeds := fuzzSeeds(f)
	f.Add(seeds[0], seeds[1], seeds[2], seeds[3], seeds[4])
	f.Add(seeds[0], seeds[1], []byte("x"), []byte(`{"node":"n1"`), []byte(`{"holders":{"s":{}}}`))
	f.Fuzz(func(t *testing.T, desired, history, cancel, node, holders []byte) {
		k, _ := NewKeys("", "web")
		sha := strings.Repeat("a", 64)
		var d Desired
		if json.Unmarshal(desired, &d) == nil && ValidSHA(d.SHA) {
			sha = d.SHA // so that history and cancel belong to the desired SHA
		}
		pairs := api.KVPairs{
			{Key: k.Desired(), Value: desired, ModifyIndex: 5},
			{Key: k.History(sha), Value: history},
			{Key: k.Cancel(sha), Value: cancel},
			{Key: k.Node("n1"), Value: node},
			{Key: k.Slot() + ".holders", Value: holders},
			{Key: k.Slot() + "c/s1", Value: []byte(`{}`), Session: "s1"},
		}
		g := Parse(k, "web", pairs, 9)
		v := g.Gate()
		_ = g.Progress()
		if v.Open && (g.Desired == nil || g.Spec == nil || g.Cancel != nil || g.Pause != nil || v.Limit < 1) {
			t.Fatalf("gate open on %+v", g)
		}
		if g.Cancel == nil && g.Desired != nil {
			t.Fatalf("a CANCEL key exists for the desired SHA but Cancel is nil")
		}
		for _, p := range g.Problems {
			if !strings.Contains(p, k.Root()) && !strings.Contains(p, "lockstep:") && !strings.Contains(p, "desired SHA") {
				t.Fatalf("problem %q names no key", p)
			}
		}
		if (g.Desired == nil) != g.DesiredUnreadable() {
			t.Fatalf("desired present but neither decoded nor unreadable")
		}
	})
}

// fuzzSeeds are valid records of each kind and a few broken ones; the
// corpus under testdata/fuzz has more.
func fuzzSeeds(f *testing.F) [][]byte {
	f.Helper()
	s, sha, err := hashspec.Load([]byte(`{"name":"web","container":{"image":"demo:v1"},"update":{"max_parallel":2}}`),
		hashspec.FormatJSON, "seed")
	if err != nil {
		f.Fatal(err)
	}
	canon, _ := s.Canonical()
	return [][]byte{
		mustJSON(Desired{SHA: sha, Previous: strings.Repeat("b", 64), Reason: "commit"}),
		mustJSON(HistoryEntry{SHA: sha, Spec: canon}),
		mustJSON(Cancel{SHA: sha, Reason: "bad"}),
		mustJSON(NodeState{Node: "n1", SHA: sha, State: StateConverged}),
		[]byte(`{"holders":{"s1":{"name":"n1","state":"holding","since":"2026-01-01T00:00:00Z"}}}`),
		mustJSON(Failure{Node: "n1", SHA: sha, Error: "unhealthy"}),
		mustJSON(Pause{SHA: sha, Failures: 1}),
		[]byte(`{"sha":"` + sha[:30]),
		[]byte(`null`),
		[]byte(`{"sha":"` + strings.ToUpper(sha) + `"}`),
	}
}
