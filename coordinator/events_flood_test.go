package coordinator

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// A node's token may write any number and size of keys in its own part of
// the log, which only its honest agent prunes. history reads the log
// bounded: at most the newest events of each node's part, under a size
// cap, and names what it cut and left unread, while the operators' events
// and another node's are all shown. It read the whole of events/ at once
// (8 MB and more for the flood below) and showed every flooded event.
func TestHistoryBoundsANodesFlood(t *testing.T) {
	tests := []struct {
		name       string
		small, big int   // events n1 floods its part with, and keys of 400 KiB
		maxBytes   int64 // what one history may read
		unread     bool  // whether a big key must be named as left unread
	}{
		{"many events", 300, 0, DefaultReadLimit, false},
		// The listing cut at the read limit, then n1's part cut at its
		// own, its names and its newest keys, each cut at its limit.
		{"many events and large keys", 1500, 16, DefaultReadLimit + eventPartLimit + eventNamesLimit +
			2*DefaultNodeEventLimit*eventKeyLimit + (64 << 10), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, k := floodedLog(t, tc.small, tc.big)
			c, counter := countedClient(t, srv)
			log, err := NewStore(c, "").Events(testCtx(t), "web")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("history: %d requests, %d bytes, %d events; problems %q", counter.Total(), counter.Bytes(), len(log.Events), log.Problems)
			if n := counter.Bytes(); n > tc.maxBytes {
				t.Errorf("history read %d bytes of a flood, over %d", n, tc.maxBytes)
			}
			if n := counter.Total(); n > 64 {
				t.Errorf("history made %d requests", n)
			}
			kinds := map[string]int{}
			for _, e := range log.Events {
				kinds[string(e.Writer.Kind)+" "+e.Writer.Node+" "+string(e.Kind)]++
			}
			for _, want := range []string{"operator  commit", "operator  cancel", "node n2 failure"} {
				if kinds[want] != 1 {
					t.Errorf("%q: %d events, want 1 (all: %v)", want, kinds[want], kinds)
				}
			}
			if n := kinds["node n1 failure"]; n == 0 || n > 2*DefaultNodeEventLimit {
				t.Errorf("%d events of n1's flooded part shown, want 1 to %d", n, 2*DefaultNodeEventLimit)
			}
			all := strings.Join(log.Problems, "\n")
			if !strings.Contains(all, k.NodeEvents("n1")) || !strings.Contains(all, "not shown") {
				t.Errorf("problems do not say n1's part was cut: %q", log.Problems)
			}
			if tc.unread && !strings.Contains(all, k.NodeEvents("n1")+"99-big00") {
				t.Errorf("problems do not name the keys too large to read: %q", log.Problems)
			}
		})
	}
}

// floodedLog is a group with an operator's commit, a failure n2's agent
// logged, then n1's part flooded as n1's token may (small events and big
// keys whose names sort last), then an operator's cancel.
func floodedLog(t *testing.T, small, big int) (*consultest.Server, Keys) {
	t.Helper()
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	st := NewStore(srv.Client(), "")
	k, _ := st.Keys("web")
	res, err := st.Commit(ctx, "web", specWith(t, "pause", 5, 1), "me", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordFailure(ctx, "web", "n2", res.SHA, "boom"); err != nil {
		t.Fatal(err)
	}
	ev := mustJSON(Event{Kind: EventFailure, At: time.Now().UTC(), By: AgentBy("n1"), Node: "n1"})
	var ops api.TxnOps
	for i := range small {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: fmt.Sprintf("%s%020d-flood", k.NodeEvents("n1"), i), Value: ev}})
		if len(ops) == maxTxnOps || i == small-1 {
			if _, _, err := st.txn(ctx, ops); err != nil {
				t.Fatal(err)
			}
			ops = nil
		}
	}
	junk := bytes.Repeat([]byte("x"), 400<<10)
	for i := range big {
		if _, err := srv.Client().KV().Put(&api.KVPair{Key: fmt.Sprintf("%s99-big%02d", k.NodeEvents("n1"), i), Value: junk}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Cancel(ctx, "web", "", "stop", "alice@ops"); err != nil {
		t.Fatal(err)
	}
	return srv, k
}

// Each key of the log is in one part, which a reader bounds on its own:
// a node's, the operators', a folder no writer of this version writes,
// or the log's own level, from before the parts.
func TestEventPartOf(t *testing.T) {
	k, _ := NewKeys("", "web")
	e := k.EventsPrefix()
	for _, tc := range []struct{ key, want string }{
		{k.OperatorEvents() + "1-a-0", k.OperatorEvents()},
		{k.NodeEvents("n1") + "1-a-0", k.NodeEvents("n1")},
		{k.NodeEvents("n1") + "x/y", k.NodeEvents("n1")},
		{k.NodeEventsPrefix() + "stray", k.NodeEventsPrefix()},
		{e + "other/x", e + "other/"},
		{e + "1-a-0", e},
	} {
		t.Run(tc.key, func(t *testing.T) {
			if got := eventPartOf(k, tc.key); got != tc.want {
				t.Errorf("eventPartOf(%q) = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

// An honest fleet's log outgrows one listing by its size alone: the parts
// are then read part by part, which is no problem to report, and every
// event is still there.
func TestHistoryOfAnHonestLogPastTheLimit(t *testing.T) {
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	st := NewStore(srv.Client(), "")
	if _, err := st.Commit(ctx, "web", specWith(t, "pause", 5, 1), "me", "v1"); err != nil {
		t.Fatal(err)
	}
	const nodes, each = 40, 3
	k, _ := st.Keys("web")
	for n := range nodes {
		node := fmt.Sprintf("n%02d", n)
		var ops api.TxnOps
		for i := range each {
			ev := mustJSON(Event{Kind: EventFailure, At: time.Now().UTC(), By: AgentBy(node), Node: node})
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: fmt.Sprintf("%s%020d-e", k.NodeEvents(node), i), Value: ev}})
		}
		if _, _, err := st.txn(ctx, ops); err != nil {
			t.Fatal(err)
		}
	}
	c, counter := countedClient(t, srv)
	small := NewStore(c, "")
	small.limit = 8 << 10 // the whole log is some 40 KiB
	log, err := small.Events(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(log.Problems) != 0 {
		t.Errorf("problems %q, want none: nothing was cut", log.Problems)
	}
	if got := len(log.Events); got != nodes*each+1 {
		t.Errorf("%d events, want %d (the commit and every node's)", got, nodes*each+1)
	}
	if n := counter.Total(); n < nodes {
		t.Errorf("%d requests: the log was not read part by part", n)
	}
	t.Logf("history: %d requests, %d bytes", counter.Total(), counter.Bytes())
}
