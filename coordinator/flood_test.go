package coordinator

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// byteCounter counts the bytes of the answers' bodies that its client reads.
type byteCounter struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (b *byteCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.base.RoundTrip(r)
	if err == nil {
		resp.Body = &countedBody{ReadCloser: resp.Body, n: &b.n}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countedBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// flooded is a group with a spec committed, n1's record, and what one
// node's token may write under slot/: 16 keys of 400 KiB under
// slot/.holders/, and a key lockstep never writes.
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
		if _, err := srv.Client().KV().Put(&api.KVPair{Key: fmt.Sprintf("%s.holders/junk%02d", k.Slot(), i), Value: big}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Client().KV().Put(&api.KVPair{Key: k.Slot() + "junk", Value: []byte("{}")}, nil); err != nil {
		t.Fatal(err)
	}
	return srv, k
}

// An agent's look accepts at most lookLimit: past it, it reads the holders
// record alone (the node's claim is in it) and names the keys under
// slot/.holders/ that any node's token may write, so one node cannot make
// every look download what it wrote there. It read all of it (8.7 MB).
func TestLookBoundsSlotFlood(t *testing.T) {
	srv, k := flooded(t)
	counter := &byteCounter{base: http.DefaultTransport.(*http.Transport).Clone()}
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme, cfg.HttpClient = srv.HTTPAddr, "http", &http.Client{Transport: counter}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := NewStore(c, "").ReadFor(testCtx(t), "web", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if gs.Spec == nil || len(gs.Nodes) != 1 {
		t.Fatalf("look: spec %v, nodes %+v", gs.Spec, gs.Nodes)
	}
	if n := counter.n.Load(); n > lookLimit+(64<<10) {
		t.Fatalf("one look downloaded %d bytes, over the %d it accepts", n, lookLimit)
	}
	if all := strings.Join(gs.Problems, "\n"); !strings.Contains(all, k.Slot()+".holders/junk00") {
		t.Errorf("the look's problems do not name the keys it left unread: %q", gs.Problems)
	}
	t.Logf("one look: %d bytes; problems %q", counter.n.Load(), gs.Problems)
}

// status, commit and an agent recording a failure read the whole tree:
// bounded, they download at most DefaultReadLimit of a flood, read the
// rest part by part, and name what they left unread.
func TestReadBoundsSlotFlood(t *testing.T) {
	srv, k := flooded(t)
	counter := &byteCounter{base: http.DefaultTransport.(*http.Transport).Clone()}
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme, cfg.HttpClient = srv.HTTPAddr, "http", &http.Client{Transport: counter}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := NewStore(c, "").Read(testCtx(t), "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if gs.Spec == nil || len(gs.Nodes) != 1 || len(gs.History) != 1 {
		t.Fatalf("read: spec %v, nodes %+v, history %d", gs.Spec, gs.Nodes, len(gs.History))
	}
	if n := counter.n.Load(); n > DefaultReadLimit+(256<<10) {
		t.Fatalf("one read downloaded %d bytes, over the %d it accepts", n, DefaultReadLimit)
	}
	t.Logf("one read: %d bytes; problems: %q", counter.n.Load(), gs.Problems)
	all := strings.Join(gs.Problems, "\n")
	for _, want := range []string{k.Slot() + ".holders/junk00", k.Slot() + "junk", "not read"} {
		if !strings.Contains(all, want) {
			t.Errorf("problems do not name %s: %q", want, gs.Problems)
		}
	}
}

func TestPlanSplit(t *testing.T) {
	k, _ := NewKeys("", "web")
	r, s := k.Root(), k.Slot()
	names := []string{r + "desired", r + "history/a", r + "history/b", r + "nodes/n1", r + "ops/x/y",
		s + "c/s2", s + ".holders/s1", s + ".holders", s + ".tail", s + ".holders/n1/s1", s + "junk", s + "c/"}
	got := planSplit(k, names)
	want := splitPlan{
		gets:       []string{r + "desired"},
		lists:      []string{r + "history/", r + "nodes/", r + "ops/"},
		slot:       []string{s + ".holders", s + "c/s2", s + ".holders/s1"},
		unexpected: []string{s + ".holders/n1/s1", s + "junk", s + "c/"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("planSplit:\n got %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct {
		rel  string
		want slotKeyKind
	}{
		{".holders", slotRecord}, {".tail", slotTail}, {".holders/abc", slotEntry}, {"c/abc", slotEntry},
		{".holdersx", slotUnexpected}, {".holders/", slotUnexpected}, {"c/a/b", slotUnexpected}, {"x", slotUnexpected},
	} {
		t.Run(tc.rel, func(t *testing.T) {
			if got := classifySlotKey(tc.rel); got != tc.want {
				t.Errorf("classifySlotKey(%q) = %d, want %d", tc.rel, got, tc.want)
			}
		})
	}
}
