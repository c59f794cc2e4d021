package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/lockstep"
)

// `node rm` refuses a node that Consul shows alive, removes one that left,
// and forces with --force; what it removed is checked in Consul. A claim
// on a slot that still counts is left to lockstep, and said so.
func TestNodeRm(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	sha := commitK(t, srv.HTTPAddr, 1)
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	k := webKeys(t)
	register(t, c, "live")
	for _, n := range []string{"live", "gone", "claimed"} {
		putNode(t, st, coordinator.NodeState{Node: n, SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: time.Now()})
	}
	putKV(t, c, k.Node("junk"), "{garbage")
	holders := `{"holders":{},"claims":{"claimed":{"session":"0b7d6d2e-0000-4000-8000-00000000dead","since":"` +
		time.Now().UTC().Format(time.RFC3339) + `","until":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}}}`
	putKV(t, c, lockstep.HoldersKey(k.Slot()), holders)
	exists := func(node string) bool {
		p, _, err := c.KV().Get(k.Node(node), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p != nil
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		want   string // in stdout or stderr
		exists bool   // the node's record after
	}{
		{"a registered node is refused", []string{"live"}, 1, "is registered in Consul's catalog", true},
		{"a counting claim is refused", []string{"claimed"}, 1, "its claim on a slot counts against max_parallel until", true},
		{"a node that left is removed", []string{"gone", "--reason", "host retired"}, 0, "removed node gone from group web", false},
		{"a garbage record is removed", []string{"junk"}, 0, "removed node junk", false},
		{"forced, the claim left to count", []string{"claimed", "--force"}, 0, "its claim on a slot still counts against max_parallel", false},
		{"forced, a live node", []string{"live", "--force"}, 0, "warning: forced although its instance of service rollagent-web is registered", false},
		{"no such node", []string{"nobody"}, 1, "no record of this node", false},
		{"a bad name", []string{"../desired"}, 1, "node:", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCLI(t, srv.HTTPAddr, append([]string{"node", "rm", "web"}, tt.args...)...)
			if code != tt.code || !strings.Contains(out+errs, tt.want) {
				t.Fatalf("code %d, want %d; output lacks %q:\n%s%s", code, tt.code, tt.want, out, errs)
			}
			if got := exists(strings.TrimPrefix(tt.args[0], "../")); got != tt.exists {
				t.Fatalf("record of %s exists: %v, want %v", tt.args[0], got, tt.exists)
			}
		})
	}
	if p, _, err := c.KV().Get(lockstep.HoldersKey(k.Slot()), nil); err != nil || p == nil || string(p.Value) != holders {
		t.Errorf("the holders record changed: %v %v", p, err)
	}
	if p, _, err := c.KV().Get(k.Desired(), nil); err != nil || p == nil {
		t.Errorf("desired is gone: %v", err)
	}
	// Each removal is in the event log, from Consul's own KV, and nothing
	// refused is.
	log, err := st.Events(context.Background(), "web")
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, e := range log.Events {
		if e.Kind == coordinator.EventNodeRemoved {
			recorded = append(recorded, e.Node+":"+e.Reason)
		}
	}
	want := []string{"gone:host retired", "junk:", "claimed:forced although", "live:forced although"}
	if len(recorded) != len(want) {
		t.Fatalf("removals logged %q, want %q", recorded, want)
	}
	for i := range want {
		if !strings.HasPrefix(recorded[i], want[i]) {
			t.Errorf("removal %d logged %q, want it to start %q", i, recorded[i], want[i])
		}
	}
}

// node rm says what becomes of the removed node's claim: lost, or counting
// until released or reported lost, however long ago its lease began.
func TestClaimNote(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		claim lockstep.Claim
		want  string
	}{
		{"within its lease", lockstep.Claim{Since: now.Add(-time.Minute), Until: now.Add(12 * time.Minute)},
			"its claim on a slot still counts against max_parallel, as the node may be half replaced: it ends when the node releases it or, with its agent gone, when a node in line has seen it gone for its lease (13m0s, so not within 12m0s) and records it lost"},
		{"its lease long past", lockstep.Claim{Since: now.Add(-time.Hour), Until: now.Add(-47 * time.Minute)},
			"its claim on a slot still counts against max_parallel, as the node may be half replaced: it ends when the node releases it or, with its agent gone, when a node in line has seen it gone for its lease (13m0s, so not within 0s) and records it lost"},
		{"lost", lockstep.Claim{Since: now.Add(-time.Hour), Until: now.Add(-47 * time.Minute), Lost: true},
			"its claim on a slot was already reported lost and no longer counts against max_parallel"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := claimNote(&coordinator.Removal{Claim: &tt.claim}, now); got != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
