package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// status shows both waits of an order: the group's gate waiting for the
// group update.after names, with how far it is, and the node that waits
// to go last (update.last), in text and in JSON; a commit that closes a
// cycle is refused, naming it.
func TestStatusShowsTheOrder(t *testing.T) {
	srv, c, st := groupkit.Dev(t)
	ctx := testkit.Context(t, time.Minute)
	dir := t.TempDir()
	commit := func(group, spec string) (int, string) {
		t.Helper()
		path := filepath.Join(dir, group+".hcl")
		if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runCLI(t, srv.HTTPAddr, "commit", group, "-f", path)
		return code, out + errs
	}
	if code, out := commit("managers", "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  last {\n    check = \"raft-leader\"\n  }\n}\n"); code != 0 {
		t.Fatalf("commit managers: %s", out)
	}
	if code, out := commit("workers", "container { image = \"rollagent-demo/web:v1\" }\nupdate {\n  after = [\"managers\"]\n}\n"); code != 0 {
		t.Fatalf("commit workers: %s", out)
	}
	if code, out := commit("managers", "container { image = \"rollagent-demo/web:v2\" }\nupdate {\n  after = [\"workers\"]\n}\n"); code == 0 ||
		!strings.Contains(out, "group managers waits for group workers, which waits for group managers") {
		t.Fatalf("commit managers after workers: code %d, %s; want the cycle refused", code, out)
	}
	gs, err := st.Read(ctx, "managers", nil)
	if err != nil {
		t.Fatal(err)
	}
	sha := gs.Desired.SHA
	node := leaderCheckPassing(t, c)
	for _, n := range []coordinator.NodeState{
		{Node: "m1", ConsulNode: "h1", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: time.Now()},
		{Node: "m2", ConsulNode: node, Desired: sha, State: coordinator.StateWaiting, Since: time.Now(), Gate: coordinator.GateWaitingToGoLast},
		{Node: "m3", ConsulNode: "h3", Desired: sha, State: coordinator.StateWaiting, Since: time.Now()},
	} {
		if err := st.PutNode(ctx, "managers", n); err != nil {
			t.Fatal(err)
		}
	}
	_, out, _ := runCLI(t, srv.HTTPAddr, "status", "workers")
	if want := "CLOSED (waiting_for_group): waiting for group managers (1 of 3 converged on " + coordinator.ShortSHA(sha) + ")"; !strings.Contains(out, want) {
		t.Errorf("status workers: want %q in:\n%s", want, out)
	}
	_, out, _ = runCLI(t, srv.HTTPAddr, "status", "managers")
	if want := `m2 waits to go last (check "raft-leader" passes on it)`; !strings.Contains(out, want) || strings.Contains(out, "CLOSED") {
		t.Errorf("status managers: want %q and an open gate in:\n%s", want, out)
	}
	_, out, _ = runCLI(t, srv.HTTPAddr, "status", "managers", "-o", "json")
	var doc struct {
		GoLast []struct{ Node, Check string } `json:"waiting_to_go_last"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.GoLast) != 1 || doc.GoLast[0].Node != "m2" || doc.GoLast[0].Check != "raft-leader" {
		t.Errorf("status -o json waiting_to_go_last = %+v, want m2 on raft-leader", doc.GoLast)
	}
}
