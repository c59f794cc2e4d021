package coordinator

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// rawEvents reads group web's log straight from Consul's KV, in the order
// Consul applied the writes, without the store's decoding.
func rawEvents(t *testing.T, c *api.Client) []Event {
	t.Helper()
	pairs, _, err := c.KV().List(DefaultPrefix+"groups/web/events/", nil)
	if err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(pairs, func(i, j int) bool {
		if pairs[i].CreateIndex != pairs[j].CreateIndex {
			return pairs[i].CreateIndex < pairs[j].CreateIndex
		}
		return pairs[i].Key < pairs[j].Key
	})
	out := make([]Event, 0, len(pairs))
	for _, p := range pairs {
		var e Event
		if err := json.Unmarshal(p.Value, &e); err != nil {
			t.Fatalf("%s: %v", p.Key, err)
		}
		out = append(out, e)
	}
	return out
}

// same says how got differs from want in what a test fixes: kind, by,
// SHAs and node, and that the reason contains want's.
func same(got, want Event) string {
	if got.Kind != want.Kind || got.By != want.By || got.SHA != want.SHA || got.From != want.From ||
		got.Node != want.Node || !strings.Contains(got.Reason, want.Reason) || got.At.IsZero() {
		return fmt.Sprintf("got %+v\nwant %+v", got, want)
	}
	return ""
}

// Every action on a group appends its events to the log, in the
// transaction of the action, and a repeat that changes nothing appends
// nothing.
func TestEveryActionIsLogged(t *testing.T) {
	c, st := devStore(t)
	ctx := testCtx(t)
	v1, v2 := release(t, "v1", "pause", 1), release(t, "v2", "rollback", 1)
	s1, _ := v1.SHA()
	s2, _ := v2.SHA()
	v3 := release(t, "v3", "rollback", 2)
	s3, _ := v3.SHA()
	steps := []struct {
		name string
		do   func() error
		want []Event
	}{
		{"commit", func() error { _, err := st.Commit(ctx, "web", v1, "op@h", "commit"); return err },
			[]Event{{Kind: EventCommit, By: "op@h", SHA: s1}}},
		{"commit again writes nothing", func() error { _, err := st.Commit(ctx, "web", v1, "op@h", "commit"); return err }, nil},
		{"failure reaching max_failures pauses", func() error {
			_, err := st.RecordFailure(ctx, "web", "n1", s1, "unhealthy")
			return err
		}, []Event{{Kind: EventFailure, By: "agent:n1", SHA: s1, Node: "n1", Reason: "unhealthy"},
			{Kind: EventPause, By: "agent:n1", SHA: s1, Reason: "reached max_failures=1"}}},
		{"a node's repeat counts once", func() error {
			_, err := st.RecordFailure(ctx, "web", "n1", s1, "unhealthy")
			return err
		}, nil},
		{"resume", func() error { _, err := st.ResumeBy(ctx, "web", "op@h"); return err },
			[]Event{{Kind: EventResume, By: "op@h", SHA: s1, Reason: "lifted the pause"}}},
		{"commit of another", func() error { _, err := st.Commit(ctx, "web", v2, "op2@h", "commit"); return err },
			[]Event{{Kind: EventCommit, By: "op2@h", SHA: s2, From: s1}}},
		{"a node converges on v2, which a record of its own is not logged", func() error {
			return st.PutNode(ctx, "web", NodeState{Node: "n1", SHA: s2, Desired: s2, State: StateConverged, Since: time.Now()})
		}, nil},
		{"rollback", func() error { _, err := st.Rollback(ctx, "web", s1, "op@h"); return err },
			[]Event{{Kind: EventRollback, By: "op@h", SHA: s1, From: s2, Reason: "rollback to"}}},
		{"cancel", func() error { _, err := st.Cancel(ctx, "web", "", "bad image", "op@h"); return err },
			[]Event{{Kind: EventCancel, By: "op@h", SHA: s1, Reason: "bad image"}}},
		{"commit after the cancel", func() error { _, err := st.Commit(ctx, "web", v3, "op@h", "commit"); return err },
			[]Event{{Kind: EventCommit, By: "op@h", SHA: s3, From: s1}}},
		{"a lost node, reported by another", func() error {
			_, err := st.RecordFailureBy(ctx, "web", "n2", "n3", s3, "n3 lost while replacing; not back within 1m")
			return err
		}, []Event{{Kind: EventFailure, By: "agent:n2", SHA: s3, Node: "n3", Reason: "lost while replacing"}}},
		{"automatic rollback", func() error {
			a, err := st.RecordFailure(ctx, "web", "n1", s3, "unhealthy")
			if err == nil && a != ActionRollback {
				err = fmt.Errorf("action %v, want rollback", a)
			}
			return err
		}, []Event{{Kind: EventFailure, By: "agent:n1", SHA: s3, Node: "n1", Reason: "unhealthy"},
			{Kind: EventAutoRollback, By: "agent:n1", SHA: s2, From: s3, Reason: "reached max_failures"}}},
		{"node removed", func() error {
			return st.AppendEvent(ctx, "web", Event{Kind: EventNodeRemoved, By: "op@h", Node: "n3", Reason: "decommissioned"})
		}, []Event{{Kind: EventNodeRemoved, By: "op@h", Node: "n3", Reason: "decommissioned"}}},
	}
	var seen int
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.do(); err != nil {
				t.Fatal(err)
			}
			evs := rawEvents(t, c)
			if len(evs) != seen+len(s.want) {
				t.Fatalf("%d events after %d, want %d new: %+v", len(evs), seen, len(s.want), evs[min(seen, len(evs)):])
			}
			for i, w := range s.want {
				if d := same(evs[seen+i], w); d != "" {
					t.Error(d)
				}
			}
			seen = len(evs)
		})
	}
	// The store reads the same log back, and the group's read is not
	// troubled by it.
	log, err := st.Events(ctx, "web")
	if err != nil || len(log.Events) != seen || len(log.Problems) != 0 {
		t.Fatalf("Events: %d events, problems %v, err %v; want %d", len(log.Events), log.Problems, err, seen)
	}
	if g := read(t, st, "web"); len(g.Problems) != 0 {
		t.Fatalf("the group's read with a log: problems %v", g.Problems)
	}
}

// A rollback writes history/<sha> again (what an agent's token may not)
// but keeps the first commit's time and author.
func TestRollbackKeepsTheFirstHistoryRecord(t *testing.T) {
	c, st := devStore(t)
	s1 := commit(t, st, "web", release(t, "v1", "pause", 1))
	k, _ := st.Keys("web")
	before, _, err := c.KV().Get(k.History(s1), nil)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, st, "web", release(t, "v2", "pause", 1))
	if _, err := st.Rollback(testCtx(t), "web", s1, "someone-else"); err != nil {
		t.Fatal(err)
	}
	after, _, err := c.KV().Get(k.History(s1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(after.Value) != string(before.Value) || after.ModifyIndex != before.ModifyIndex {
		t.Fatalf("history record changed by the rollback:\n%s\n%s", before.Value, after.Value)
	}
}

// The log keeps the newest events up to its limit, deleting the oldest.
func TestEventLogPrunesTheOldest(t *testing.T) {
	c := consultest.NewDev(t).Client()
	st := NewStore(c, "").WithEventLimit(3)
	for i := range 5 {
		if err := st.AppendEvent(testCtx(t), "web", Event{Kind: EventNodeRemoved, By: "t", Node: fmt.Sprintf("n%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	evs := rawEvents(t, c)
	var nodes []string
	for _, e := range evs {
		nodes = append(nodes, e.Node)
	}
	if strings.Join(nodes, ",") != "n2,n3,n4" {
		t.Fatalf("log after 5 appends at limit 3: %v, want n2,n3,n4", nodes)
	}
}

func TestPruneBatches(t *testing.T) {
	// Given in the order Consul applied them (appliedOrder), which is not
	// the keys' order: the keys' order must not matter.
	keys := func(n int) []string {
		pairs := api.KVPairs{}
		for i := n - 1; i >= 0; i-- {
			pairs = append(pairs, &api.KVPair{Key: fmt.Sprintf("e/%04d", i), CreateIndex: uint64(100 + i)})
		}
		return appliedOrder(pairs)
	}
	tests := []struct {
		name        string
		n, limit    int
		wantBatches []int
		wantFirst   string
	}{
		{"under the limit", 3, 5, nil, ""},
		{"at the limit", 5, 5, nil, ""},
		{"one over", 6, 5, []int{1}, "e/0000"},
		{"more than a transaction", 200, 10, []int{64, 64, 62}, "e/0000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := pruneBatches(keys(tc.n), tc.limit)
			var sizes []int
			for _, b := range got {
				sizes = append(sizes, len(b))
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tc.wantBatches) {
				t.Fatalf("batches %v, want %v", sizes, tc.wantBatches)
			}
			if len(got) > 0 && (got[0][0] != tc.wantFirst || got[len(got)-1][len(got[len(got)-1])-1] != fmt.Sprintf("e/%04d", tc.n-tc.limit-1)) {
				t.Fatalf("deleted %s..., want the oldest first", got[0][0])
			}
		})
	}
}

// A record under events/ that is not an event is a problem of the log,
// never a crash, and the other events are read.
func TestGarbageEventIsAProblem(t *testing.T) {
	c, st := devStore(t)
	if err := st.AppendEvent(testCtx(t), "web", Event{Kind: EventNodeRemoved, By: "t", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	k, _ := st.Keys("web")
	for i, v := range []string{`not json`, `{"kind":"explosion","at":"2024-01-01T00:00:00Z"}`, `{"kind":"commit"}`, `{"kind":"commit","at":"2024-01-01T00:00:00Z","sha":"xyz"}`} {
		if _, err := c.KV().Put(&api.KVPair{Key: k.EventsPrefix() + fmt.Sprintf("zz-%d", i), Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	log, err := st.Events(testCtx(t), "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(log.Events) != 1 || len(log.Problems) != 4 {
		t.Fatalf("events %+v, problems %q; want 1 and 4", log.Events, log.Problems)
	}
	if _, err := st.EventOp("web", Event{Kind: "explosion"}); err == nil {
		t.Fatal("EventOp took an event of no known kind")
	}
}

// An append to the log wakes none of the blocking queries agents hold
// (desired, the slot's prefix), so a thousand idle agents stay asleep
// while failures and commands are logged; status --watch, which blocks on
// the whole tree, does wake.
func TestEventAppendWakesNoAgent(t *testing.T) {
	c, st := devStore(t)
	commit(t, st, "web", release(t, "v1", "pause", 1))
	k, _ := st.Keys("web")
	if _, err := c.KV().Put(&api.KVPair{Key: k.Slot() + ".holders", Value: []byte(`{}`)}, nil); err != nil {
		t.Fatal(err)
	}
	const wait = 2 * time.Second
	tests := []struct {
		name  string
		query func(index uint64) (uint64, error)
		wakes bool
	}{
		{"desired", func(i uint64) (uint64, error) {
			_, m, err := c.KV().Get(k.Desired(), &api.QueryOptions{WaitIndex: i, WaitTime: wait})
			return lastIndex(m, err)
		}, false},
		{"slot prefix", func(i uint64) (uint64, error) {
			_, m, err := c.KV().List(k.Slot(), &api.QueryOptions{WaitIndex: i, WaitTime: wait})
			return lastIndex(m, err)
		}, false},
		{"group tree (status --watch)", func(i uint64) (uint64, error) {
			_, m, err := c.KV().List(k.Root(), &api.QueryOptions{WaitIndex: i, WaitTime: wait})
			return lastIndex(m, err)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			index, err := tc.query(0)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan time.Duration, 1)
			start := time.Now()
			go func() {
				_, _ = tc.query(index)
				done <- time.Since(start)
			}()
			time.Sleep(200 * time.Millisecond)
			if err := st.AppendEvent(testCtx(t), "web", Event{Kind: EventNodeRemoved, By: "t", Node: "n9"}); err != nil {
				t.Fatal(err)
			}
			took := <-done
			if woke := took < wait-300*time.Millisecond; woke != tc.wakes {
				t.Fatalf("blocking query returned after %v (wait %v): woke %v, want %v", took, wait, woke, tc.wakes)
			}
		})
	}
}

func lastIndex(m *api.QueryMeta, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	return m.LastIndex, nil
}

// Where an event was written says who wrote it, and which events that
// writer's part vouches for.
func TestEventWriterAndVouched(t *testing.T) {
	k, _ := NewKeys("", "web")
	tests := []struct {
		name    string
		key     string
		e       Event
		writer  Writer
		vouched bool
	}{
		{"operator's commit", k.OperatorEvents() + "1-a-0", Event{Kind: EventCommit, By: "alice@laptop"}, OperatorWriter(), true},
		{"node's own failure", k.NodeEvents("n1") + "1-a-0", Event{Kind: EventFailure, By: "agent:n1", Node: "n1"}, NodeWriter("n1"), true},
		{"node reports another lost", k.NodeEvents("n1") + "1-a-0", Event{Kind: EventFailure, By: "agent:n1", Node: "n3"}, NodeWriter("n1"), true},
		{"node's commit", k.NodeEvents("n1") + "1-a-0", Event{Kind: EventCommit, By: "alice@laptop"}, NodeWriter("n1"), false},
		{"node's failure in another's name", k.NodeEvents("n1") + "1-a-0", Event{Kind: EventFailure, By: "agent:n2"}, NodeWriter("n1"), false},
		{"from before the parts", k.EventsPrefix() + "1-a-0", Event{Kind: EventCommit, By: "alice@laptop"}, Writer{Kind: WriterUnknown}, false},
		{"node part without a node", k.NodeEventsPrefix() + "x", Event{Kind: EventFailure, By: "agent:x"}, Writer{Kind: WriterUnknown}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := k.writerOf(tc.key)
			if w != tc.writer || vouched(w, tc.e) != tc.vouched {
				t.Fatalf("writer %+v vouched %v; want %+v %v", w, vouched(w, tc.e), tc.writer, tc.vouched)
			}
		})
	}
}

// Pruning keeps the events Consul applied last, not those whose keys sort
// last: a key starts with its writer's wall clock, and the operators'
// part is shared by every operator's host. A CANCEL from a host whose
// clock is an hour behind stays in the log.
func TestPruningKeepsTheNewestByConsulsOrder(t *testing.T) {
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	st := NewStore(srv.Client(), "").WithEventLimit(3)
	for i := range 3 {
		if _, err := st.Commit(ctx, "web", specWith(t, "pause", 2, i+1), "me", "v"); err != nil {
			t.Fatal(err)
		}
	}
	st.now = func() time.Time { return time.Now().Add(-time.Hour) }
	if _, err := st.Cancel(ctx, "web", "", "stop", "bob@laptop"); err != nil {
		t.Fatal(err)
	}
	log, err := st.Events(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(log.Events); n != 3 || log.Events[n-1].Kind != EventCancel {
		t.Fatalf("%d events, the last %+v: the cancel Consul applied last was pruned", n, log.Events[n-1])
	}
}
