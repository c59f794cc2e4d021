package coordinator

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

const downSHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// downFixture is a Consul -dev server and a store whose clock stands
// still (so that a mark of a full read stays fresh however slow the
// machine), with a client that counts its requests.
type downFixture struct {
	srv *consultest.Server
	c   *api.Client
	st  *Store
	n   *testkit.Counter
	now time.Time
}

func newDownFixture(t *testing.T) *downFixture {
	t.Helper()
	srv := consultest.NewDev(t)
	c, n := testkit.CountedClient(srv)
	f := &downFixture{srv: srv, c: c, st: NewStore(c, DefaultPrefix), n: n, now: time.Now().UTC()}
	f.st.now = func() time.Time { return f.now }
	f.st.WriteDownChecks(hclog.NewNullLogger()) // as an agent's store
	return f
}

// put writes group's record of n, converged, as an agent of this version
// does (StopIndex), unless old: as an agent from before the stop index.
func (f *downFixture) put(t *testing.T, group string, n NodeState, old bool) {
	t.Helper()
	n.State, n.Since, n.StopIndex = StateConverged, time.Now().UTC(), !old
	if err := f.st.PutNode(t.Context(), group, n); err != nil {
		t.Fatal(err)
	}
}

// reg registers node's instance of group's service with its workload
// check at workload, and its agent's check at alive unless "".
func (f *downFixture) reg(t *testing.T, group, node, workload, alive string) {
	t.Helper()
	checks := api.AgentServiceChecks{{CheckID: WorkloadCheckID(group, node), TTL: "1m", Status: workload}}
	if alive != "" {
		checks = append(checks, &api.AgentServiceCheck{CheckID: ServiceID(group, node) + ":alive", TTL: "1m", Status: alive})
	}
	err := f.srv.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{ID: ServiceID(group, node),
		Name: ServiceName(group), Checks: checks})
	if err != nil {
		t.Fatal(err)
	}
}

// kv sets key to value, or deletes it for a nil value.
func (f *downFixture) kv(t *testing.T, key string, value []byte) {
	t.Helper()
	var err error
	if value == nil {
		_, err = f.srv.Client().KV().Delete(key, nil)
	} else {
		_, err = f.srv.Client().KV().Put(&api.KVPair{Key: key, Value: value}, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// down is Down of group, and whether it read every record (a listing of
// nodes/).
func (f *downFixture) down(t *testing.T, group string) (map[string]DownReason, bool) {
	t.Helper()
	k, _ := f.st.Keys(group)
	before := f.n.To("GET", "/v1/kv/"+k.NodesPrefix())
	got, err := f.st.Down(t.Context(), group)
	if err != nil {
		t.Fatal(err)
	}
	return got, f.n.To("GET", "/v1/kv/"+k.NodesPrefix()) > before
}

// Down gives the same answer on its two paths, the full read of every
// record and the read of the records the failing checks and the stop
// index name, for each case that makes a node down or not (the cases of
// TestDownReasons but a host down, which always takes the full path:
// TestDownReasons covers it).
func TestDownSameOnBothPaths(t *testing.T) {
	f := newDownFixture(t)
	stopped := time.Now().UTC()
	cases := []struct {
		name string
		set  func(t *testing.T, g string, k Keys)
		want DownReason // "": not down
	}{
		{"workload critical", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthCritical, "")
			f.put(t, g, NodeState{Node: "n", SHA: downSHA}, false)
		}, DownWorkload},
		{"workload warning, starting", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthWarning, "")
			f.put(t, g, NodeState{Node: "n", SHA: downSHA}, false)
		}, DownWorkload},
		{"first deploy, workload critical", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthCritical, "")
			f.put(t, g, NodeState{Node: "n"}, false)
		}, ""},
		{"stopped before its first deploy", func(t *testing.T, g string, k Keys) {
			f.put(t, g, NodeState{Node: "n", Stopped: &stopped}, false)
		}, ""},
		{"back: record without the mark, its index key left", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthPassing, "")
			f.put(t, g, NodeState{Node: "n", SHA: downSHA}, false)
			f.kv(t, k.Stopped("n"), []byte("stale"))
		}, ""},
		{"index key without a record", func(t *testing.T, g string, k Keys) {
			f.kv(t, k.Stopped("n"), []byte("stale"))
		}, ""},
		{"stopping: marked, service still registered", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthPassing, "")
			f.put(t, g, NodeState{Node: "n", SHA: downSHA, Stopped: &stopped}, false)
		}, DownAgentStopped},
		{"stopped, host up", func(t *testing.T, g string, k Keys) {
			f.put(t, g, NodeState{Node: "n", SHA: downSHA, ConsulNode: f.srv.Name, Stopped: &stopped}, false)
		}, DownAgentStopped},
		{"stopped, host left the catalog", func(t *testing.T, g string, k Keys) {
			f.put(t, g, NodeState{Node: "n", SHA: downSHA, ConsulNode: "left-the-catalog", Stopped: &stopped}, false)
		}, DownAgentStopped},
		{"stopped, Consul node never said", func(t *testing.T, g string, k Keys) {
			f.put(t, g, NodeState{Node: "n", SHA: downSHA, Stopped: &stopped}, false)
		}, DownAgentStopped},
		{"stopped, workload critical too", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthCritical, "")
			f.put(t, g, NodeState{Node: "n", SHA: downSHA, Stopped: &stopped}, false)
		}, DownAgentStopped},
		{"agent not answering", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthPassing, api.HealthCritical)
			f.put(t, g, NodeState{Node: "n", SHA: downSHA, ConsulNode: f.srv.Name}, false)
		}, DownAgent},
		{"agent not answering, no record yet", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthPassing, api.HealthCritical)
		}, DownAgent},
		{"removed, its dead service failing", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthCritical, api.HealthCritical)
			f.kv(t, k.Removed("n"), []byte(`{"node":"n"}`))
		}, ""},
		{"removed, then a record that does not decode", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthPassing, api.HealthCritical)
			f.kv(t, k.Removed("n"), []byte(`{"node":"n"}`))
			f.kv(t, k.Node("n"), []byte("{"))
		}, DownAgent},
		{"a check on another Consul node than its record names", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthCritical, api.HealthCritical)
			f.put(t, g, NodeState{Node: "n", SHA: downSHA, ConsulNode: "elsewhere"}, false)
		}, ""},
		{"workload critical on its own Consul node", func(t *testing.T, g string, k Keys) {
			f.reg(t, g, "n", api.HealthCritical, "")
			f.put(t, g, NodeState{Node: "n", SHA: downSHA, ConsulNode: f.srv.Name}, false)
		}, DownWorkload},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := "case" + string(rune('a'+i))
			k, _ := f.st.Keys(g)
			// A healthy neighbour, so that no group is judged on one node.
			f.put(t, g, NodeState{Node: "ok", SHA: downSHA}, false)
			tc.set(t, g, k)
			want := map[string]DownReason{}
			if tc.want != "" {
				want["n"] = tc.want
			}
			full, read := f.down(t, g) // no mark yet: a full read
			if !read || !maps.Equal(full, want) {
				t.Fatalf("full read %v: Down = %v, want %v", read, full, want)
			}
			cheap, read := f.down(t, g) // the full read's mark is fresh
			if read || !maps.Equal(cheap, want) {
				t.Fatalf("after a full read: read every record %v, Down = %v, want %v", read, cheap, want)
			}
		})
	}
}

// A stop mark of an agent from before the stop index (no index key, no
// StopIndex) counts at the next Down while any record lacks StopIndex, as
// every Down then reads every record; one written after a full read found
// every record indexed counts from the next full read, within
// fullReadEvery.
func TestDownCountsAnOlderAgentsStop(t *testing.T) {
	f := newDownFixture(t)
	stopped := time.Now().UTC()
	f.put(t, "web", NodeState{Node: "new", SHA: downSHA}, false)
	f.put(t, "web", NodeState{Node: "old", SHA: downSHA}, true)
	for range 2 {
		if got, read := f.down(t, "web"); !read || len(got) != 0 {
			t.Fatalf("a record lacks StopIndex: read every record %v, Down = %v, want a full read and none", read, got)
		}
	}
	f.put(t, "web", NodeState{Node: "old", SHA: downSHA, Stopped: &stopped}, true)
	want := map[string]DownReason{"old": DownAgentStopped}
	if got, read := f.down(t, "web"); !read || !maps.Equal(got, want) {
		t.Fatalf("an older agent's stop: read every record %v, Down = %v, want a full read and %v", read, got, want)
	}

	// Upgraded: every record keeps the index, and a full read says so.
	f.put(t, "web", NodeState{Node: "old", SHA: downSHA}, false)
	f.down(t, "web")
	if got, read := f.down(t, "web"); read || len(got) != 0 {
		t.Fatalf("every record indexed: read every record %v, Down = %v, want neither", read, got)
	}
	// An older agent again (a downgrade), within fullReadEvery of
	// that full read: not seen until the next.
	f.put(t, "web", NodeState{Node: "old", SHA: downSHA, Stopped: &stopped}, true)
	if got, _ := f.down(t, "web"); len(got) != 0 {
		t.Fatalf("within fullReadEvery of a full read: Down = %v, want the window documented: none", got)
	}
	f.now = f.now.Add(fullReadEvery)
	if got, read := f.down(t, "web"); !read || !maps.Equal(got, want) {
		t.Fatalf("fullReadEvery after the full read: read every record %v, Down = %v, want a full read and %v", read, got, want)
	}
	if got, read := f.down(t, "web"); !read || !maps.Equal(got, want) {
		t.Fatalf("the next: read every record %v, Down = %v, want a full read and %v", read, got, want)
	}
}

// With no node down and a fresh mark, Down reads no record: the failing
// checks, the removal marks, the stop index and the mark, four small
// reads, whatever the size of the group.
func TestDownReadsNoRecordWhenNoneIsDown(t *testing.T) {
	f := newDownFixture(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		f.reg(t, "web", n, api.HealthPassing, api.HealthPassing)
		f.put(t, "web", NodeState{Node: n, SHA: downSHA, ConsulNode: f.srv.Name}, false)
	}
	// A store that does not write the mark (the CLI's: `status`) reads
	// every record and writes nothing.
	writes := func() int { return f.n.Count(func(r testkit.Request) bool { return r.Method != "GET" }) }
	w := writes()
	if _, err := NewStore(f.c, DefaultPrefix).Down(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	if n := writes() - w; n != 0 {
		t.Fatalf("a store that does not write the mark sent %d writes", n)
	}
	f.down(t, "web")
	before, txns, all := f.n.Total(), f.n.To("PUT", "/v1/txn"), f.n.To("GET", "/v1/health/state/any")
	got, read := f.down(t, "web")
	if read || len(got) != 0 {
		t.Fatalf("read every record %v, Down = %v; want neither", read, got)
	}
	if n, tx := f.n.Total()-before, f.n.To("PUT", "/v1/txn")-txns; n != 5 || tx != 0 {
		t.Fatalf("Down sent %d requests, %d of them transactions; want 5 reads and no transaction", n, tx)
	}
	// Failing checks by their state, which Consul indexes: not every
	// check of the datacenter, which the state "any" walks (a full read
	// does, once every fullReadEvery).
	if n := f.n.To("GET", "/v1/health/state/any") - all; n != 0 {
		t.Fatalf("Down read every check %d times; want the critical and warning ones only", n)
	}
	marks := f.n.Count(func(r testkit.Request) bool { return r.Method == "PUT" && strings.HasSuffix(r.Path, "/downcheck") })
	if marks != 1 {
		t.Fatalf("the mark was written %d times; want once, by the first full read", marks)
	}
}

// Whoever writes a stop mark writes its index key with it, when its record
// keeps the index (StopIndex): MarkStopped, and any write of a record
// with the mark (NodeOps, PutNode); `node rm` deletes it with the record.
func TestStopIndexWrittenWithTheMark(t *testing.T) {
	f := newDownFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, _ := f.st.Keys("web")
	has := func(node string) bool {
		t.Helper()
		p, _, err := f.c.KV().Get(k.Stopped(node), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p != nil
	}
	rec := NodeState{Node: "n1", SHA: downSHA, State: StateConverged, Since: time.Now().UTC(), StopIndex: true}
	if err := f.st.PutNode(ctx, "web", rec); err != nil {
		t.Fatal(err)
	}
	if has("n1") {
		t.Fatal("a record without the mark set the index")
	}
	if marked, err := f.st.MarkStopped(ctx, "web", rec, time.Now()); err != nil || !marked {
		t.Fatalf("MarkStopped = %v, %v", marked, err)
	}
	if !has("n1") {
		t.Fatal("MarkStopped did not set the index")
	}
	for _, node := range []string{"n1", "n9"} { // the key there, or not
		if err := f.st.MayIndexStops(ctx, "web", node); err != nil {
			t.Fatalf("MayIndexStops(%s) with a token that may: %v", node, err)
		}
	}
	if !has("n1") {
		t.Fatal("MayIndexStops deleted the index key")
	}
	if err := f.st.ClearStopped(ctx, "web", "n1"); err == nil || !has("n1") {
		t.Fatalf("ClearStopped while the record carries the mark: %v, index there %v; want an error and the key kept", err, has("n1"))
	}
	if err := f.st.PutNode(ctx, "web", rec); err != nil { // the agent back: its record without the mark
		t.Fatal(err)
	}
	if err := f.st.ClearStopped(ctx, "web", "n1"); err != nil || has("n1") {
		t.Fatalf("ClearStopped: %v, index still there %v", err, has("n1"))
	}
	old := NodeState{Node: "n2", SHA: downSHA, State: StateConverged, Since: time.Now().UTC()}
	if err := f.st.PutNode(ctx, "web", old); err != nil {
		t.Fatal(err)
	}
	if marked, err := f.st.MarkStopped(ctx, "web", old, time.Now()); err != nil || !marked || has("n2") {
		t.Fatalf("MarkStopped of a record without StopIndex: %v, %v, index %v; want marked, no index", marked, err, has("n2"))
	}
	now := time.Now().UTC()
	rec.Stopped = &now
	if err := f.st.PutNode(ctx, "web", rec); err != nil || !has("n1") {
		t.Fatalf("PutNode of a marked record: %v, index %v", err, has("n1"))
	}
	if _, err := f.st.RemoveNode(ctx, "web", "n1", true, "ops", "gone"); err != nil {
		t.Fatal(err)
	}
	if has("n1") {
		t.Fatal("node rm left the stop index key")
	}
}

// A mark of a full read vouches only while it is fresh, says every record
// is indexed, and is not dated in the future past the skew allowed.
func TestDownCheckMarkFresh(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name string
		m    *DownCheckMark
		want bool
	}{
		{"none", nil, false},
		{"just now", &DownCheckMark{At: now, AllIndexed: true}, true},
		{"a record not indexed", &DownCheckMark{At: now, AllIndexed: false}, false},
		{"nearly stale", &DownCheckMark{At: now.Add(-fullReadEvery + time.Millisecond), AllIndexed: true}, true},
		{"stale", &DownCheckMark{At: now.Add(-fullReadEvery), AllIndexed: true}, false},
		{"a little ahead", &DownCheckMark{At: now.Add(downCheckSkew), AllIndexed: true}, true},
		{"far ahead", &DownCheckMark{At: now.Add(downCheckSkew + time.Millisecond), AllIndexed: true}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.fresh(now); got != tc.want {
				t.Fatalf("fresh = %v, want %v", got, tc.want)
			}
		})
	}
}
