package coordinator

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// flooded is a group with a spec committed, n1's record, and what n1's
// token may write under slot/: 16 keys of 400 KiB under its own
// slot/.holders/n1/; and a key lockstep never writes, which only an
// operator's token may.
func flooded(t *testing.T) (*consultest.Server, Keys) {
	t.Helper()
	ctx := testCtx(t)
	srv := consultest.NewDev(t)
	st := NewStore(srv.Client(), "")
	k, _ := st.Keys("web")
	if _, err := st.Commit(ctx, "web", specWith(t, "pause", 2, 1), "me", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := st.PutNode(ctx, "web", NodeState{Node: "n1", State: StateWaiting, Since: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 400<<10)
	for i := range 16 {
		if _, err := srv.Client().KV().Put(&api.KVPair{Key: fmt.Sprintf("%s.holders/n1/junk%02d", k.Slot(), i), Value: big}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Client().KV().Put(&api.KVPair{Key: k.Slot() + "junk", Value: []byte("{}")}, nil); err != nil {
		t.Fatal(err)
	}
	return srv, k
}

// An agent's look accepts at most lookLimit: past it, it reads the holders
// record and the slot keys (the node's claim is in them) and names the keys under
// slot/.holders/ (a node's token may write its own), so one node cannot make
// every look download what it wrote there. It read all of it (8.7 MB).
func TestLookBoundsSlotFlood(t *testing.T) {
	srv, k := flooded(t)
	c, counter := countedClient(t, srv)
	gs, err := NewStore(c, "").ReadFor(testCtx(t), "web", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if gs.Spec == nil || len(gs.Nodes) != 1 {
		t.Fatalf("look: spec %v, nodes %+v", gs.Spec, gs.Nodes)
	}
	if n := counter.Bytes(); n > lookLimit+(64<<10) {
		t.Fatalf("one look downloaded %d bytes, over the %d it accepts", n, lookLimit)
	}
	if all := strings.Join(gs.Problems, "\n"); !strings.Contains(all, k.Slot()+".holders/n1/junk00") {
		t.Errorf("the look's problems do not name the keys it left unread: %q", gs.Problems)
	}
	t.Logf("one look: %d bytes; problems %q", counter.Bytes(), gs.Problems)
}

// status, commit and an agent recording a failure read the whole tree:
// bounded, they download at most DefaultReadLimit of a flood, read the
// rest part by part, and name what they left unread.
func TestReadBoundsSlotFlood(t *testing.T) {
	srv, k := flooded(t)
	c, counter := countedClient(t, srv)
	gs, err := NewStore(c, "").Read(testCtx(t), "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if gs.Spec == nil || len(gs.Nodes) != 1 || len(gs.History) != 1 {
		t.Fatalf("read: spec %v, nodes %+v, history %d", gs.Spec, gs.Nodes, len(gs.History))
	}
	if n := counter.Bytes(); n > DefaultReadLimit+(256<<10) {
		t.Fatalf("one read downloaded %d bytes, over the %d it accepts", n, DefaultReadLimit)
	}
	t.Logf("one read: %d bytes; problems: %q", counter.Bytes(), gs.Problems)
	all := strings.Join(gs.Problems, "\n")
	for _, want := range []string{k.Slot() + ".holders/n1/junk00", k.Slot() + "junk", "not read"} {
		if !strings.Contains(all, want) {
			t.Errorf("problems do not name %s: %q", want, gs.Problems)
		}
	}
}

func TestPlanSplit(t *testing.T) {
	k, _ := NewKeys("", "web")
	r, s := k.Root(), k.Slot()
	names := []string{r + "desired", r + "history/a", r + "history/b", r + "nodes/n1", r + "ops/x/y",
		s + "c/s2", s + ".holders/s1", s + ".holders", s + ".tail", s + ".holders/n1/s1", s + "junk", s + "c/",
		s + "c/n1/s3", s + "c/no name/s4", s + "c/n1/s1/x", s + ".holders/.slots/3"}
	got := planSplit(k, names)
	want := splitPlan{
		gets:       []string{r + "desired"},
		lists:      []string{r + "history/", r + "nodes/", r + "ops/"},
		slot:       []string{s + ".holders", s + ".holders/.slots/3", s + "c/s2", s + ".holders/s1", s + ".holders/n1/s1", s + "c/n1/s3"},
		unexpected: []string{s + "junk", s + "c/", s + "c/no name/s4", s + "c/n1/s1/x"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("planSplit:\n got %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct {
		rel  string
		want slotKeyKind
	}{
		{".holders", slotRecord}, {".tail", slotTail}, {".holders/n1/abc", slotEntry}, {"c/n1/abc", slotEntry},
		{".holders/.slots/3", slotNumbered}, {".holders/abc", slotLegacy}, {"c/abc", slotLegacy}, {"c/a/b/c", slotUnexpected}, {"c/no name/b", slotUnexpected},
		{".holdersx", slotUnexpected}, {".holders/", slotUnexpected}, {"c/n1/", slotUnexpected}, {"x", slotUnexpected},
	} {
		t.Run(tc.rel, func(t *testing.T) {
			if got := classifySlotKey(tc.rel); got != tc.want {
				t.Errorf("classifySlotKey(%q) = %d, want %d", tc.rel, got, tc.want)
			}
		})
	}
}

// Slot keys named by session alone, as agents of an older version wrote
// them, are counted as lockstep counts them and named as a problem; keys
// filed under a node's name are not.
func TestParseNamesOlderSlotKeys(t *testing.T) {
	k, _ := NewKeys("", "web")
	s := k.Slot()
	pairs := api.KVPairs{
		{Key: s + ".holders/old", Session: "old", Value: []byte(`{"name":"n0","state":"holding"}`)},
		{Key: s + "c/n1/s1", Session: "s1", Value: []byte(`{"name":"n1","state":"waiting"}`)},
	}
	gs := Parse(k, "web", pairs, 1)
	all := strings.Join(gs.Problems, "\n")
	if !strings.Contains(all, "older version") || !strings.Contains(all, s+".holders/old") || strings.Contains(all, s+"c/n1/s1") {
		t.Fatalf("problems %q: want the older key named, and only it", gs.Problems)
	}
	if !gs.Holders.Live("old") || gs.Holders.Names()["s1"] != "n1" {
		t.Fatalf("holders %+v, names %v", gs.Holders, gs.Holders.Names())
	}
}

// countedClient is a client with NewClient's read limits that counts the
// bytes Consul's answers carry.
func countedClient(t *testing.T, srv *consultest.Server) (*api.Client, *testkit.Counter) {
	t.Helper()
	counter := &testkit.Counter{}
	return srv.ClientVia(LimitTransport(counter)), counter
}
