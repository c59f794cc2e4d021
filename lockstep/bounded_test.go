package lockstep

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/readlimit"
	"github.com/rollagent/rollagent/internal/testkit"
)

// fakeSession is an ID of the shape Consul gives sessions, of no session.
func fakeSession() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// boundedClient is a client of srv whose transport honours the bounds
// lockstep's reads set, as coordinator.NewClient's does, and the Counter
// that counts what it reads.
func boundedClient(srv *consultest.Server) (*api.Client, *testkit.Counter) {
	cnt := &testkit.Counter{}
	return srv.ClientVia(readlimit.Transport(cnt)), cnt
}

// flood writes each key with size bytes, as a node's token may write
// what its policy lets it.
func flood(t testing.TB, c *api.Client, keys []string, size int) {
	t.Helper()
	v := []byte(strings.Repeat("x", size))
	for _, k := range keys {
		if _, err := c.KV().Put(&api.KVPair{Key: k, Value: v}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// ownFlood is n keys under name's own contender and holder folders,
// each named by a session ID of no session.
func ownFlood(name string, n int) []string {
	var keys []string
	for range n {
		keys = append(keys, HolderKey(testPrefix, name, fakeSession()), ContenderKey(testPrefix, name, fakeSession()))
	}
	return keys
}

func TestPlanSplit(t *testing.T) {
	p := normPrefix(testPrefix)
	own := ContenderKey(p, "me", fakeSession())
	s1, s2 := fakeSession(), fakeSession()
	many := func(dir func(string, string, string) string, name string, n int) []string {
		var out []string
		for range n {
			out = append(out, dir(p, name, fakeSession()))
		}
		return out
	}
	tests := []struct {
		name                string
		names               []string
		gets, busy, ignored int
	}{
		{name: "the record and the tail are not read again", names: []string{p + holdersKey, p + tailKey}},
		{name: "entries and slot keys are read", names: []string{HolderKey(p, "a", s1), ContenderKey(p, "a", s2), SlotKey(p, 3)}, gets: 3},
		{name: "keys no session can lock are not read", names: []string{p + holderPrefix + "a/flood", p + contenderPrefix + "a/x", p + "odd"}, ignored: 3},
		{name: "legacy entries are read", names: []string{p + holderPrefix + s1, p + contenderPrefix + s2}, gets: 2},
		{name: "a name past the cap of holder keys counts as holding", names: many(HolderKey, "a", maxKeysPerName+1), busy: 1},
		{name: "a name past the cap of contender keys is ignored", names: many(ContenderKey, "a", maxKeysPerName+1), ignored: maxKeysPerName + 1},
		{name: "our own key is read past the cap", names: append(many(ContenderKey, "me", maxKeysPerName), own), gets: maxKeysPerName + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planSplit(p, tt.names, own)
			if len(got.gets) != tt.gets || len(got.busy) != tt.busy || len(got.ignored) != tt.ignored || len(got.slotsUnread) != 0 {
				t.Errorf("planSplit = %+v", got)
			}
		})
	}
	t.Run("slot keys past the cap count, lowest numbers read", func(t *testing.T) {
		var names []string
		for n := maxSlotReads + 4; n >= 0; n-- {
			names = append(names, SlotKey(p, n))
		}
		got := planSplit(p, names, own)
		if len(got.gets) != maxSlotReads || got.gets[0] != SlotKey(p, 0) || !slices.Equal(got.slotsUnread, []int{maxSlotReads, maxSlotReads + 1, maxSlotReads + 2, maxSlotReads + 3, maxSlotReads + 4}) {
			t.Errorf("gets %d (first %s), unread %v", len(got.gets), got.gets[0], got.slotsUnread)
		}
	})
}

// floodedSem is a Semaphore on a bounded client, and the log it writes.
func floodedSem(t *testing.T, c *api.Client, name string) (*Semaphore, *testkit.Buffer) {
	t.Helper()
	var buf testkit.Buffer
	m, err := New(c, newSession(t, c), Options{Prefix: testPrefix, Name: name,
		Logger: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})})
	if err != nil {
		t.Fatal(err)
	}
	return m, &buf
}

// A key of our own name that a bounded read left unread is no slot we
// know we use: it does not let our grant "take over" a slot beside K
// others, and counts as our grant would, once.
func TestUnreadOwnKeyIsNoSlotOfOurs(t *testing.T) {
	m := &Semaphore{opts: Options{Name: "me", WaitTime: time.Second, Releases: &ReleaseClock{}},
		log: hclog.NewNullLogger(), now: time.Now, orphans: map[string]orphanSeen{}}
	tests := []struct {
		name string
		k    int
		snap *snapshot
		full bool
	}{
		{"unread key of ours beside a holder", 1, &snapshot{live: map[string]Entry{"s1": {Name: "a"}}, unread: []string{"me"}}, true},
		{"unread key of ours beside a holder, K=2", 2, &snapshot{live: map[string]Entry{"s1": {Name: "a"}}, unread: []string{"me"}}, false},
		{"unread keys of ours and another's", 2, &snapshot{live: map[string]Entry{"s1": {Name: "a"}}, unread: []string{"me", "b"}}, true},
		{"unread key of ours alone", 1, &snapshot{live: map[string]Entry{}, unread: []string{"me"}}, false},
		{"our live holder key beside a holder", 1, &snapshot{live: map[string]Entry{"s1": {Name: "a"}, "s2": {Name: "me"}}}, false},
		{"no one", 1, &snapshot{live: map[string]Entry{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait, full, err := m.headWait(context.Background(), Gate{Limit: tt.k}, tt.snap)
			if err != nil || full != tt.full || (wait > 0) != tt.full {
				t.Errorf("headWait = %v, %v, %v; want full %v", wait, full, err, tt.full)
			}
		})
	}
}
