package main

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
	"github.com/rollagent/rollagent/lockstep"
)

// waitOutput polls until out holds want after the first `after` bytes.
func waitOutput(t *testing.T, out *testkit.Buffer, after int, want string) int {
	t.Helper()
	n := 0
	if !testkit.PollEvery(30*time.Second, 50*time.Millisecond, func() bool {
		s := out.String()
		n = len(s)
		return len(s) > after && strings.Contains(s[after:], want)
	}) {
		t.Fatalf("output never showed %q; got:\n%s", want, out.String())
	}
	return n
}

func commitWeb(t *testing.T, addr string) string {
	t.Helper()
	code, out, errs := runCLI(t, addr, "commit", "web", "-f", "testdata/web.json")
	if code != 0 {
		t.Fatalf("commit: code %d, stderr %s", code, errs)
	}
	return strings.SplitN(out, "\n", 2)[0]
}

// commitWebSpec commits spec for web from a file named file, whose ending
// gives the format, and returns the SHA the commit printed.
func commitWebSpec(t *testing.T, addr, file, spec string) string {
	t.Helper()
	code, out, errs := runCLI(t, addr, "commit", "web", "-f", writeSpec(t, file, []byte(spec)))
	if code != 0 {
		t.Fatalf("commit: code %d, stderr %s", code, errs)
	}
	return strings.SplitN(out, "\n", 2)[0]
}

// readStatusJSON decodes `status web -o json` into doc.
func readStatusJSON(t *testing.T, addr string, doc any) {
	t.Helper()
	_, out, _ := runCLI(t, addr, "status", "web", "-o", "json")
	if err := json.Unmarshal([]byte(out), doc); err != nil {
		t.Fatalf("status -o json: %v in:\n%s", err, out)
	}
}

// gateDoc is the gate of `status -o json`, what of it these tests read,
// decoded apart from gateJSON so that a renamed field fails them.
type gateDoc struct {
	State   string     `json:"state"`
	Reason  string     `json:"reason"`
	OpensAt *time.Time `json:"opens_at"`
}

// putHolders writes rec as the holders record of web's slot, as lockstep
// would.
func putHolders(t *testing.T, c *api.Client, rec string) {
	t.Helper()
	putKV(t, c, lockstep.HoldersKey(groupkit.Keys(t, "web").Slot()), rec)
}

// jsonKeys lists the keys of a JSON object m, sorted, joined by commas.
func jsonKeys(m any) string {
	o, _ := m.(map[string]any)
	return strings.Join(slices.Sorted(maps.Keys(o)), ",")
}

func putNode(t *testing.T, st *coordinator.Store, n coordinator.NodeState) {
	t.Helper()
	if err := st.PutNode(context.Background(), "web", n); err != nil {
		t.Fatal(err)
	}
}

// The schema of `status -o json` is what docs/status-json.md promises;
// scripts depend on these names, so any change must be deliberate.
func TestStatusJSONSchema(t *testing.T) {
	srv := consultest.NewDev(t)
	sha := commitWeb(t, srv.HTTPAddr)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	putNode(t, st, coordinator.NodeState{Node: "a", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: time.Now()})
	putNode(t, st, coordinator.NodeState{Node: "b", Desired: sha, State: coordinator.StateWaiting, Since: time.Now()})

	code, out, errs := runCLI(t, srv.HTTPAddr, "status", "web", "-o", "json")
	if code != 0 {
		t.Fatalf("status: code %d, stderr %s", code, errs)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, out)
	}
	for _, tt := range []struct{ path, got, want string }{
		{"top level", jsonKeys(doc), "at,desired,domain_waits,failures,gate,group,holders,image_splits,nodes,orphaned_claims,problems,progress,progress_deadline,schema,slot_budget,stall,unavailable,waiting_for_slot,waiting_to_go_last"},
		{"slot_budget", jsonKeys(doc["slot_budget"]), "full,used_by"},
		{"gate", jsonKeys(doc["gate"]), "blocked_by,max_failures,max_failures_policy,max_parallel,max_parallel_policy,nodes,open,opens_at,passed_fence,reason,sha,state"},
		{"progress", jsonKeys(doc["progress"]), "by_state,converged,done,eta,failed,lost,other,replacing,total,verifying,waiting"},
		{"progress.by_state", jsonKeys(doc["progress"].(map[string]any)["by_state"]),
			"behind,cancelled,converged,down,failed,invalid,lost,paused,replacing,unknown,verifying,waiting"},
		{"progress.eta", jsonKeys(doc["progress"].(map[string]any)["eta"]), "basis,per_node_seconds,seconds"},
		{"desired", jsonKeys(doc["desired"]), "author,committed_at,reason,sha"},
		{"nodes[0]", jsonKeys(doc["nodes"].([]any)[0]), "consul,counted_as,counts,desired,node,sha,since,state"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("keys %s, want %s", tt.got, tt.want)
			}
		})
	}
	for _, list := range []string{"holders", "orphaned_claims", "unavailable", "failures", "problems", "image_splits", "waiting_to_go_last", "domain_waits"} {
		if _, ok := doc[list].([]any); !ok {
			t.Errorf("%s is %v, want a list (empty, not null)", list, doc[list])
		}
	}
	for _, list := range []string{"passed_fence", "blocked_by"} {
		if _, ok := doc["gate"].(map[string]any)[list].([]any); !ok {
			t.Errorf("gate.%s is %v, want a list (empty, not null)", list, doc["gate"])
		}
	}
	if _, ok := doc["slot_budget"].(map[string]any)["used_by"].([]any); !ok {
		t.Errorf("slot_budget.used_by is %v, want a list (empty, not null)", doc["slot_budget"])
	}
	if v, ok := doc["stall"]; !ok || v != nil {
		t.Errorf("stall is %v, want null: b waits only since now", v)
	}
	if doc["schema"] != float64(statusSchema) {
		t.Errorf("schema %v, want %d", doc["schema"], statusSchema)
	}
}

// An operator watching a rollout sees a Consul outage as a line under the
// last known state, and the watch carries on when Consul is back.
func TestStatusWatchRidesOutConsulOutage(t *testing.T) {
	srv := consultest.New(t, consultest.Options{Persistent: true})
	sha := commitWeb(t, srv.HTTPAddr)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	putNode(t, st, coordinator.NodeState{Node: "node-a", Desired: sha, State: coordinator.StateWaiting, Since: time.Now()})

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--consul-addr=" + srv.HTTPAddr, "status", "web", "--watch"}, &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("watch exited %d: %s", code, errb.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("watch did not stop when its context ended")
		}
	})

	n := waitOutput(t, &out, 0, "node-a")
	srv.Stop()
	n = waitOutput(t, &out, n, "(retrying)")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitReady(consultest.StartTimeout); err != nil {
		t.Fatal(err)
	}
	putNode(t, st, coordinator.NodeState{Node: "node-b", Desired: sha, State: coordinator.StateWaiting, Since: time.Now()})
	waitOutput(t, &out, n, "node-b")
}
