package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
)

// With the shipped policies, a node's token writes events only in its own
// part of the log: not in the operators' part, nor in another node's. What
// it writes there is shown as its claim (a "commit by alice" is n1's
// claim, not alice's commit), and 500 events with the highest keys push
// out no one else's: each writer prunes its own part alone, and history
// shows a node's newest events alone, naming the rest.
func TestAgentTokenCannotForgeOrEraseTheLog(t *testing.T) {
	srv := aclConsul(t)
	c := srv.Client()
	op := tokenForNode(t, c, "acl-operator.hcl", "web", "n1")
	if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+op, "commit", "web", "-f", "testdata/noname.json", "--author=alice@ops-laptop"); code != 0 {
		t.Fatal(errs)
	}
	n1c := clientWith(t, srv.HTTPAddr, tokenForNode(t, c, "acl-policy.hcl", "web", "n1"))
	n1 := coordinator.NewStore(n1c, "")
	n2 := storeWith(t, srv.HTTPAddr, tokenForNode(t, c, "acl-policy.hcl", "web", "n2"))
	k, _ := n1.Keys("web")
	gs, err := coordinator.NewStore(c, "").Read(t.Context(), "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	forged := func(i int) []byte {
		return fmt.Appendf(nil, `{"kind":"commit","at":%q,"by":"alice@ops-laptop","sha":%q,"reason":"forged %d"}`,
			time.Now().UTC().Format(time.RFC3339Nano), gs.Desired.SHA, i)
	}
	for _, part := range []string{k.OperatorEvents(), k.NodeEvents("n2")} {
		t.Run("n1 writes in "+part, func(t *testing.T) {
			before := kvSnapshot(t, c)
			_, err := n1c.KV().Put(&api.KVPair{Key: part + "99999999999999999999-forged-0", Value: forged(0)}, nil)
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission denied") {
				t.Fatalf("n1's token wrote an event in %s: %v", part, err)
			}
			kvUnchanged(t, c, before)
		})
	}
	// n1 floods its own part with keys that sort after every real one.
	ops := api.TxnOps{}
	for i := range coordinator.DefaultEventLimit {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.NodeEvents("n1") + fmt.Sprintf("99999999999999999999-%04d", i), Value: forged(i)}})
		if len(ops) == 64 || i == coordinator.DefaultEventLimit-1 {
			if err := txnErr(n1c.Txn().Txn(ops, nil)); err != nil {
				t.Fatalf("n1 writes in its own part: %v", err)
			}
			ops = api.TxnOps{}
		}
	}
	// The operator's cancel and n2's failure each prune their own part.
	if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+op, "cancel", "web", "--reason=bad image"); code != 0 {
		t.Fatal(errs)
	}
	if _, err := n2.RecordFailure(t.Context(), "web", "n2", gs.Desired.SHA, "unhealthy"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, srv.HTTPAddr, "--token="+op, "history", "web")
	if code != 0 {
		t.Fatal(errs)
	}
	sha := coordinator.ShortSHA(gs.Desired.SHA)
	for _, want := range []string{
		`(?m)^\S+ +commit +alice@ops-laptop +` + sha + ` `,
		`(?m)^\S+ +cancel +\S+ +` + sha + ` +- +bad image$`,
		`(?m)^\S+ +failure +agent:n2 +` + sha + ` +n2 +unhealthy$`,
		`(?m)^\S+ +commit \(claim\) +agent:n1 as alice@ops-laptop +` + sha + ` +- +forged 499$`,
		// A node's part shows its newest events alone, and says so.
		`(?m)^problem: "` + regexp.QuoteMeta(k.NodeEvents("n1")) + `" has 500 events, .* the oldest 460 are not shown$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("history has no line matching %s", want)
		}
	}
	if n := strings.Count(out, "commit (claim)"); n != 2*coordinator.DefaultNodeEventLimit {
		t.Errorf("history shows %d of n1's %d claims, want its newest %d", n, coordinator.DefaultEventLimit, 2*coordinator.DefaultNodeEventLimit)
	}
	if regexp.MustCompile(`(?m)^\S+ +commit +alice@ops-laptop .*forged`).MatchString(out) {
		t.Errorf("a forged commit shows as alice's:\n%s", out)
	}
	_, out, _ = runCLI(t, srv.HTTPAddr, "--token="+op, "history", "web", "-o", "json")
	var h historyJSON
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatal(err)
	}
	first := h.Events[0]
	if first.Kind != coordinator.EventCommit || !first.Vouched || first.Writer.Kind != coordinator.WriterOperator {
		t.Errorf("first event: %+v; want the operator's commit, vouched", first)
	}
	last := h.Events[len(h.Events)-1]
	if last.Kind != coordinator.EventFailure || !last.Vouched || last.Writer != coordinator.NodeWriter("n2") {
		t.Errorf("last event: %+v; want n2's failure, vouched", last)
	}
	for _, e := range h.Events {
		if strings.HasPrefix(e.Reason, "forged") && (e.Vouched || e.Writer != coordinator.NodeWriter("n1")) {
			t.Fatalf("forged event %+v: vouched or not n1's", e)
		}
	}
}
