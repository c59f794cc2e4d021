package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// An agent back deletes its stop index key once its record without the
// mark is written (ClearStopped). A delete that lands after the agent
// stopped again (sent just before the stop and held by Consul, say in a
// leader election, while the stop's transaction went through) must not
// take the new mark's key with it: Down, trusting a fresh full read,
// would no longer find the stop.
func TestClearStoppedLeavesALaterStop(t *testing.T) {
	f := newDownFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f.put(t, "web", NodeState{Node: "ok", SHA: downSHA}, false)
	f.put(t, "web", NodeState{Node: "n1", SHA: downSHA}, false)
	f.down(t, "web") // a full read: every record indexed, the mark fresh
	rec := NodeState{Node: "n1", SHA: downSHA, State: StateConverged, StopIndex: true}
	if marked, err := f.st.MarkStopped(ctx, "web", rec, time.Now()); err != nil || !marked {
		t.Fatalf("MarkStopped = %v, %v", marked, err)
	}
	_ = f.st.ClearStopped(ctx, "web", "n1") // the late delete
	want := map[string]DownReason{"n1": DownAgentStopped}
	if got, _ := f.down(t, "web"); !maps.Equal(got, want) {
		t.Fatalf("a stop after a late clear of its index: Down = %v, want %v", got, want)
	}
}

// A stop mark whose index key is missing however it went (a delete that
// landed late, a restore of an older snapshot of KV) counts at every
// Down, not only at the full reads: a full read that finds it does not
// vouch for the index.
func TestDownCountsAMarkWithoutItsIndexKey(t *testing.T) {
	f := newDownFixture(t)
	stopped := time.Now().UTC()
	k, _ := f.st.Keys("web")
	f.put(t, "web", NodeState{Node: "ok", SHA: downSHA}, false)
	f.put(t, "web", NodeState{Node: "n1", SHA: downSHA, Stopped: &stopped}, false)
	f.kv(t, k.Stopped("n1"), nil)
	want := map[string]DownReason{"n1": DownAgentStopped}
	for i := range 3 {
		if got, _ := f.down(t, "web"); !maps.Equal(got, want) {
			t.Fatalf("Down #%d of a mark without its index key = %v, want %v", i+1, got, want)
		}
	}
}

// A token that may not read some record (a policy that denies it) makes
// Down fail on its read of the records the failing checks and the stop
// index name, as it does on the full read (a listing Consul filtered),
// rather than take the record for missing: a transaction's get that the
// token may not read is left out of the results, without an error.
func TestDownRefusesARecordItMayNotRead(t *testing.T) {
	srv := newACLServer(t)
	c := srv.Client()
	st := NewStore(c, DefaultPrefix)
	k, _ := st.Keys("web")
	stopped := time.Now().UTC()
	for _, n := range []NodeState{{Node: "ok", SHA: downSHA}, {Node: "n1", SHA: downSHA, Stopped: &stopped}} {
		n.State, n.Since, n.StopIndex = StateConverged, time.Now().UTC(), true
		if err := st.PutNode(t.Context(), "web", n); err != nil {
			t.Fatal(err)
		}
	}
	mark := DownCheckMark{At: time.Now().UTC(), AllIndexed: true}
	if _, err := c.KV().Put(&api.KVPair{Key: k.DownCheck(), Value: mustJSON(mark)}, nil); err != nil {
		t.Fatal(err)
	}
	rules := `key_prefix "` + k.Root() + `" { policy = "read" }
key "` + k.Node("n1") + `" { policy = "deny" }
service_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }`
	got, err := NewStore(tokenClient(t, srv, rules), DefaultPrefix).Down(t.Context(), "web")
	if !errors.Is(err, ErrACLDenied) {
		t.Fatalf("Down with a token that may not read n1's record = %v, %v; want an error wrapping ErrACLDenied", got, err)
	}
}

// newACLServer is a Consul -dev agent with default-deny ACLs, and its
// management token in its Client.
func newACLServer(t *testing.T) *consultest.Server {
	t.Helper()
	const root = "0c6cd0d6-3a5e-4f4e-9a0b-3d1c3a7c9e21"
	return consultest.New(t, consultest.Options{Token: root,
		HCL: `acl { enabled = true default_policy = "deny" tokens { initial_management = "` + root + `" agent = "` + root + `" } }`})
}

// tokenClient is a client of srv with a new token of a policy of rules.
func tokenClient(t *testing.T, srv *consultest.Server, rules string) *api.Client {
	t.Helper()
	c := srv.Client()
	p, _, err := c.ACL().PolicyCreate(&api.ACLPolicy{Name: fmt.Sprintf("p%d", time.Now().UnixNano()), Rules: rules}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := c.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: p.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Token = srv.HTTPAddr, tok.SecretID
	rc, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}
