package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// A stalled group says so above everything else, naming the waiting nodes
// and why each is stuck; slots full of nodes that do nothing are named in
// one line with why each counts.
func TestStatusTableStallAndBudgetLines(t *testing.T) {
	now := tableNow
	sha := strings.Repeat("ab", 32)
	s := statusJSON{Group: "web", At: now,
		Desired: &coordinator.Desired{SHA: sha, CommittedAt: now.Add(-10 * time.Minute)},
		Gate:    gateJSON{Open: true, Reason: "open", MaxParallel: 3},
		Budget: budgetJSON{Full: true, UsedBy: []slotUserJSON{
			{Node: "n1", Why: coordinator.SlotHolding}, {Node: "n4", Why: coordinator.SlotUnavailable},
			{Node: "n5", Why: coordinator.SlotUnavailable, Down: coordinator.DownAgentStopped}}},
		Stall: &stallJSON{QuietSince: now.Add(-2 * time.Minute),
			Waiting: []waiterJSON{{Node: "n2", Since: now.Add(-6 * time.Minute)}, {Node: "n3", Since: now.Add(-3 * time.Minute)}},
			Reasons: []stallReasonJSON{{Cause: coordinator.CauseNotInLine, Nodes: []string{"n2"}},
				{Cause: coordinator.CauseNotGranted, Nodes: []string{"n3"}}}},
	}
	var out bytes.Buffer
	if err := printTable(&out, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"STALLED: n2, n3 wait (longest 6m0s) with the gate open and a slot free; nothing has changed for 2m0s\n",
		"  why n2: not in line (no contender key, so no live session): the agent is likely down",
		"  why n3: in line with a slot free, yet never granted: a bug in rollagent",
		"slots full (3 of max_parallel 3): n1 holds one; n4 is down (its agent does not answer, or its host is gone); " +
			"n5 is down (agent stopped: nothing vouches for its workload until its agent is back, or `rollagent node rm` removes it)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// statusDoc runs `status -o json` and decodes it.
func statusDoc(t *testing.T, addr string) statusJSON {
	t.Helper()
	code, out, errs := runCLI(t, addr, "status", "web", "-o", "json")
	if code != 0 {
		t.Fatalf("status: code %d, stderr %s", code, errs)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	return s
}

// statusTable runs `status` and checks its output holds every one of want.
func statusTable(t *testing.T, addr string, want ...string) string {
	t.Helper()
	code, out, errs := runCLI(t, addr, "status", "web")
	if code != 0 {
		t.Fatalf("status: code %d, stderr %s", code, errs)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
	return out
}

// backdateCommit moves the desired record's commit time into the past, as
// if the rollout had begun d ago, instead of the test sleeping through it.
func backdateCommit(t *testing.T, c *api.Client, d time.Duration) {
	t.Helper()
	key := groupkit.Keys(t, "web").Desired()
	p, _, err := c.KV().Get(key, nil)
	if err != nil || p == nil {
		t.Fatalf("read %s: %v", key, err)
	}
	var rec coordinator.Desired
	if err := json.Unmarshal(p.Value, &rec); err != nil {
		t.Fatal(err)
	}
	rec.CommittedAt = time.Now().Add(-d).UTC()
	if p.Value, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KV().Put(p, nil); err != nil {
		t.Fatal(err)
	}
}

// Against a real Consul: a node that has waited for minutes with the gate
// open and no slot used is reported stalled, with what the slot's keys
// tell of its agent; an orphaned claim that fills the slot is no stall,
// and the budget line names it.
func TestStatusShowsStall(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	sha := commitWeb(t, srv.HTTPAddr)
	backdateCommit(t, c, 10*time.Minute)
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	putNode(t, st, coordinator.NodeState{Node: "a", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: time.Now().Add(-8 * time.Minute)})
	putNode(t, st, coordinator.NodeState{Node: "b", Desired: sha, State: coordinator.StateWaiting, Since: time.Now().Add(-5 * time.Minute)})

	t.Run("waiting node with no session", func(t *testing.T) {
		statusTable(t, srv.HTTPAddr, "STALLED: b waits (longest 5m", "  why b: not in line (no contender key")
		checkStall(t, statusDoc(t, srv.HTTPAddr), coordinator.CauseNotInLine, "b")
		checkStallKeys(t, srv.HTTPAddr)
	})

	slot := groupkit.Keys(t, "web").Slot()
	t.Run("in line and never granted", func(t *testing.T) {
		id, _, err := c.Session().Create(&api.SessionEntry{Behavior: api.SessionBehaviorDelete, TTL: "60s"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		entry := `{"name":"b","state":"waiting","since":"` + time.Now().Add(-5*time.Minute).UTC().Format(time.RFC3339) + `"}`
		if ok, _, err := c.KV().Acquire(&api.KVPair{Key: lockstep.ContenderKey(slot, "b", id), Value: []byte(entry), Session: id}, nil); err != nil || !ok {
			t.Fatalf("acquire contender key: %v %v", ok, err)
		}
		statusTable(t, srv.HTTPAddr, "STALLED: b waits", "  why b: in line with a slot free, yet never granted: a bug")
		checkStall(t, statusDoc(t, srv.HTTPAddr), coordinator.CauseNotGranted, "b")
	})

	t.Run("an orphaned claim fills the slot", func(t *testing.T) {
		since := time.Now().Add(-2 * time.Minute).UTC().Format(time.RFC3339)
		until := time.Now().Add(4 * time.Minute).UTC().Format(time.RFC3339)
		rec := `{"holders":{},"claims":{"c":{"session":"0b7d6d2e-0000-4000-8000-00000000dead","since":"` + since + `","until":"` + until + `"}}}`
		putHolders(t, c, rec)
		out := statusTable(t, srv.HTTPAddr, "slots full (1 of max_parallel 1): c holds one with its agent gone (orphaned claim)\n")
		if strings.Contains(out, "STALLED") {
			t.Errorf("a claim that counts is no stall:\n%s", out)
		}
		s := statusDoc(t, srv.HTTPAddr)
		want := []slotUserJSON{{Node: "c", Why: coordinator.SlotOrphaned}}
		if s.Stall != nil || !s.Budget.Full || len(s.Budget.UsedBy) != 1 || s.Budget.UsedBy[0] != want[0] {
			t.Errorf("stall %+v budget %+v, want no stall and a full budget used by %+v", s.Stall, s.Budget, want)
		}
	})
}

// checkStall checks that s reports one stalled node, for cause alone.
func checkStall(t *testing.T, s statusJSON, cause coordinator.StallCause, node string) {
	t.Helper()
	switch {
	case s.Stall == nil:
		t.Fatal("status -o json: stall is null")
	case len(s.Stall.Waiting) != 1 || s.Stall.Waiting[0].Node != node:
		t.Errorf("stall.waiting %+v, want %s alone", s.Stall.Waiting, node)
	case len(s.Stall.Reasons) != 1 || s.Stall.Reasons[0].Cause != cause || strings.Join(s.Stall.Reasons[0].Nodes, ",") != node:
		t.Errorf("stall.reasons %+v, want %s for %s", s.Stall.Reasons, cause, node)
	case s.Budget.Full || len(s.Budget.UsedBy) != 0:
		t.Errorf("slot_budget %+v, want empty", s.Budget)
	}
}

// checkStallKeys checks the names docs/status-json.md promises for stall.
func checkStallKeys(t *testing.T, addr string) {
	t.Helper()
	var doc map[string]any
	readStatusJSON(t, addr, &doc)
	stall, _ := doc["stall"].(map[string]any)
	first := func(list string) map[string]any {
		l, _ := stall[list].([]any)
		if len(l) == 0 {
			return nil
		}
		m, _ := l[0].(map[string]any)
		return m
	}
	for _, tt := range []struct{ path, got, want string }{
		{"stall", jsonKeys(stall), "quiet_since,reasons,waiting"},
		{"stall.waiting[0]", jsonKeys(first("waiting")), "node,since"},
		{"stall.reasons[0]", jsonKeys(first("reasons")), "cause,nodes"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s keys %s, want %s", tt.path, tt.got, tt.want)
		}
	}
}
