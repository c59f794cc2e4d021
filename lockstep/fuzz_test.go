package lockstep

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
)

// FuzzParseHolders feeds any bytes as the holders record, beside
// contender keys for the comma-separated sessions. Parsing must not panic;
// a record it accepts yields a view where only a session that locks a
// contender key holds, every other contender waits exactly once, in
// CreateIndex order, and a session in the record without a key is ignored.
func FuzzParseHolders(f *testing.F) {
	f.Add([]byte(`{"holders":{"s1":{"name":"n1","state":"holding","since":"2026-01-01T00:00:00Z"}}}`), "s1,s2")
	f.Add([]byte(`{"holders":{"ghost":{"name":"x"}}}`), "s1")
	f.Add([]byte(`{"holders":null}`), "")
	f.Add([]byte(`{holders`), "s1")
	f.Add([]byte(`null`), "s2,s1")
	f.Fuzz(func(t *testing.T, record []byte, sessions string) {
		const prefix = "rollagent/groups/web/slot/"
		var ids []string
		for _, s := range strings.Split(sessions, ",") {
			if s != "" && !slices.Contains(ids, s) {
				ids = append(ids, s)
			}
		}
		pairs := api.KVPairs{{Key: prefix + holdersKey, Value: record, ModifyIndex: 3}}
		for i, id := range ids {
			pairs = append(pairs, &api.KVPair{Key: prefix + contenderPrefix + id, Session: id, CreateIndex: uint64(10 + i)})
		}
		h, err := ParseHolders(prefix, pairs)
		if err != nil {
			if !strings.Contains(err.Error(), prefix+holdersKey) {
				t.Fatalf("error does not name the record: %v", err)
			}
			return
		}
		for id := range h.Holding {
			if !slices.Contains(ids, id) {
				t.Fatalf("%q holds without a contender key", id)
			}
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
