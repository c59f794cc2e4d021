package lockstep

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
)

// FuzzParseHolders feeds any bytes as the holders record, beside
// contender keys for the comma-separated waiting sessions and holder keys
// for the comma-separated holding ones, filed under a name each, or named
// by session alone as an older version wrote them. Parsing must not panic, and a
// record it cannot read is a problem naming the key, never an error: the
// view comes from the keys all the same. Exactly the sessions that lock a
// holder key hold, every other contender waits exactly once, in CreateIndex
// order, and a session in the record without a holder key is ignored.
func FuzzParseHolders(f *testing.F) {
	f.Add([]byte(`{"holders":{"s1":{"name":"n1","state":"holding","since":"2026-01-01T00:00:00Z"}}}`), "s2", "s1", true)
	f.Add([]byte(`{"holders":{"s1":{"name":"n1","state":"holding","since":"2026-01-01T00:00:00Z"}}}`), "s1,s2", "", false)
	f.Add([]byte(`{"holders":{"ghost":{"name":"x"}}}`), "s1", "", true)
	f.Add([]byte(`{"holders":null}`), "", "s1", false)
	f.Add([]byte(`{holders`), "s1", "s1", true)
	f.Add([]byte(`null`), "s2,s1", "s3", false)
	f.Fuzz(func(t *testing.T, record []byte, sessions, holding string, named bool) {
		const prefix = testPrefix + "/"
		ids, locked := splitIDs(sessions), splitIDs(holding)
		pairs := api.KVPairs{{Key: prefix + holdersKey, Value: record, ModifyIndex: 3}}
		dir := func(i int) string {
			if named && i%2 == 0 {
				return fmt.Sprintf("n%d/", i)
			}
			return ""
		}
		for i, id := range ids {
			pairs = append(pairs, &api.KVPair{Key: prefix + contenderPrefix + dir(i) + id, Session: id, CreateIndex: uint64(10 + i)})
		}
		for i, id := range locked {
			pairs = append(pairs, &api.KVPair{Key: prefix + holderPrefix + dir(i) + id, Session: id, CreateIndex: 5})
		}
		h := ParseHolders(prefix, pairs)
		if h.Problem != "" && !strings.Contains(h.Problem, prefix+holdersKey) {
			t.Fatalf("problem does not name the record: %v", h.Problem)
		}
		for id := range h.Holding {
			if !slices.Contains(locked, id) {
				t.Fatalf("%q holds without a holder key", id)
			}
		}
		if len(h.Holding) != len(locked) {
			t.Fatalf("holding %v, want exactly %q", h.Holding, locked)
		}
		var want []string
		for _, id := range ids {
			if _, holds := h.Holding[id]; !holds {
				want = append(want, id)
			}
		}
		if !slices.Equal(h.Waiting, want) {
			t.Fatalf("waiting %q, want %q (holding %v)", h.Waiting, want, h.Holding)
		}
	})
}

// splitIDs splits a comma-separated list, dropping empty and repeated IDs,
// and those that cannot be a session's (Consul's are UUIDs): with a "/",
// or "." or "..".
func splitIDs(s string) []string {
	var ids []string
	for _, id := range strings.Split(s, ",") {
		if validName(id) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}
