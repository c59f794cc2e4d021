package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// The JSON plan is what docs/plan-json.md promises: every key there, lists
// never null, the nodes down first, and the estimate from the last pace.
func TestPlanJSON(t *testing.T) {
	srv := consultest.NewDev(t)
	sha := planFleet(t, srv)
	st := coordinator.NewStore(srv.Client(), coordinator.DefaultPrefix)
	stopped := time.Now()
	putNode(t, st, coordinator.NodeState{Node: "n3", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: time.Now(), Stopped: &stopped})
	code, out, errs := runPlan(t, srv, "web", "-f", "testdata/plan-image.json", "-o", "json")
	if code != exitChanges {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitChanges, errs)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	for _, k := range []string{"schema", "group", "at", "sha", "desired", "changes", "diff", "policy_only", "nodes", "gate", "estimate", "notes", "problems"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("no %q in %s", k, out)
		}
	}
	documented := docFields(t, "../../docs/plan-json.md")
	for _, path := range jsonPaths("", raw) {
		if !documentedPath(documented, path) {
			t.Errorf("%s is not in docs/plan-json.md", path)
		}
	}
	var p planJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	image := fieldChange{Path: "container.image", Change: FieldChanged, Old: "rollagent-demo/web:v1", New: "rollagent-demo/web:v2"}
	if !p.Changes || p.PolicyOnly || p.Desired == nil || p.Desired.SHA != sha || !slices.Contains(p.Diff, image) {
		t.Fatalf("plan: %+v", p)
	}
	var order []string
	for _, m := range p.Nodes.Move {
		order = append(order, m.Node)
	}
	if strings.Join(order, ",") != "n3,n1,n2" || p.Nodes.Move[0].Down != coordinator.DownAgentStopped || p.Nodes.Total != 3 {
		t.Fatalf("nodes: %+v, want n3 (down) first, then n1, n2", p.Nodes)
	}
	// n3 converged only now: the pace is its span, 3 nodes at K=1.
	if e := p.Estimate; e == nil || e.Waves != 3 || e.MaxParallel != 1 || e.From.Nodes != 3 || e.From.SHA != sha {
		t.Fatalf("estimate: %+v", p.Estimate)
	}
	if !p.Gate.Open || p.Gate.State != coordinator.GateOpen || p.Notes == nil || p.Problems == nil || p.Nodes.Refused == nil {
		t.Fatalf("gate %+v, notes %v, problems %v", p.Gate, p.Notes, p.Problems)
	}
	// No change: exit 0, no difference, nothing moves for it, and the
	// gate of the desired SHA as it is.
	code, out, errs = runPlan(t, srv, "web", "-f", "testdata/web.hcl", "-o", "json")
	var same planJSON
	if err := json.Unmarshal([]byte(out), &same); err != nil || code != 0 {
		t.Fatalf("no change: exit %d, %v, stderr %q", code, err, errs)
	}
	if same.Changes || same.SHA != sha || len(same.Diff) != 0 || same.Diff == nil || len(same.Nodes.Move) != 0 ||
		same.Nodes.Total != 3 || same.Gate.State != coordinator.GateOpen || same.Estimate != nil {
		t.Fatalf("no change: %+v", same)
	}
}

// Bad input exits 1, never 2 (which says "changes"), and writes nothing; a
// group not committed yet gets a plan of its first commit.
func TestPlanBadInput(t *testing.T) {
	srv := consultest.NewDev(t)
	planFleet(t, srv)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no such file", []string{"web", "-f", "testdata/no-such.json"}, "no-such.json"},
		{"invalid spec", []string{"web", "-f", "testdata/bad-image.json"}, "image"},
		{"another group's spec", []string{"api", "-f", "testdata/web.json"}, `names group "web"`},
		{"unknown flag", []string{"web", "-f", "testdata/web.json", "--bogus"}, "bogus"},
		{"no group", []string{"-f", "testdata/web.json"}, "group"},
		{"a timeout of zero", []string{"web", "-f", "testdata/web.json", "--timeout", "0s"}, "must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runPlan(t, srv, tt.args...)
			if code != 1 || !strings.Contains(errs, tt.want) {
				t.Fatalf("exit %d stderr %q, want 1 and %q; stdout %q", code, errs, tt.want, out)
			}
		})
	}
	t.Run("not committed yet", func(t *testing.T) {
		code, out, errs := runPlan(t, srv, "api", "-f", "testdata/noname.json")
		if code != exitChanges {
			t.Fatalf("exit %d, want %d; stderr %q", code, exitChanges, errs)
		}
		for _, want := range []string{"nothing committed yet", "container.image: ", " (added)", "nodes: none yet",
			"gate now: open", "time: no earlier rollout to estimate from"} {
			if !strings.Contains(out, want) {
				t.Fatalf("plan lacks %q:\n%s", want, out)
			}
		}
	})
}

// The gate a plan shows is the one the commit would meet now: an
// operator's pause holds across commits, a CANCEL of the desired SHA does
// not apply to a new one, a closed window and a failing check hold it,
// and a node whose failure of the planned SHA is recorded does not move.
func TestPlanGate(t *testing.T) {
	t.Run("operator pause", func(t *testing.T) {
		srv := consultest.NewDev(t)
		planFleet(t, srv)
		if code, _, errs := runCLI(t, srv.HTTPAddr, "pause", "web", "--reason", "freeze"); code != 0 {
			t.Fatal(errs)
		}
		_, out, _ := runPlan(t, srv, "web", "-f", "testdata/plan-image.json")
		wantAll(t, out, "gate now: CLOSED (paused): paused by ", ": freeze (since ", "commits since do not lift it", "time: about 1m0s once the gate opens")
	})
	t.Run("cancel of the desired SHA", func(t *testing.T) {
		srv := consultest.NewDev(t)
		sha := planFleet(t, srv)
		if code, _, errs := runCLI(t, srv.HTTPAddr, "cancel", "web"); code != 0 {
			t.Fatal(errs)
		}
		code, out, _ := runPlan(t, srv, "web", "-f", "testdata/plan-image.json")
		wantAll(t, out, "gate now: open", "note: the CANCEL of "+coordinator.ShortSHA(sha)+" does not apply to the new SHA")
		if code != exitChanges {
			t.Fatalf("exit %d", code)
		}
		// The cancelled SHA itself: its commit is refused.
		code, _, errs := runPlan(t, srv, "web", "-f", "testdata/web.json")
		if code != 1 || !strings.Contains(errs, "was cancelled") {
			t.Fatalf("plan of the cancelled SHA: exit %d stderr %q", code, errs)
		}
	})
	t.Run("closed window", func(t *testing.T) {
		srv := consultest.NewDev(t)
		planFleet(t, srv)
		start := time.Now().UTC().Add(2 * time.Hour).Format("15:04")
		spec := writeSpec(t, "w.hcl", fmt.Appendf(nil, "name = \"web\"\ncontainer { image = \"rollagent-demo/web:v2\" }\nupdate {\n  window {\n    start = %q\n    length = \"1h\"\n  }\n}\n", start))
		_, out, _ := runPlan(t, srv, "web", "-f", spec)
		wantAll(t, out, "gate now: CLOSED (outside_window): outside the maintenance window", "(a hold: new grants wait)", "update.window[0].start: "+start+" (added)")
	})
	t.Run("failing check", func(t *testing.T) {
		srv := consultest.NewDev(t)
		planFleet(t, srv)
		err := srv.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "pg", Name: "postgres",
			Check: &api.AgentServiceCheck{CheckID: "lag", Name: "replication-lag", TTL: "10m", Status: api.HealthCritical}})
		if err != nil {
			t.Fatal(err)
		}
		spec := writeSpec(t, "b.hcl", []byte("name = \"web\"\ncontainer { image = \"rollagent-demo/web:v2\" }\nupdate {\n  block_on {\n    check = \"replication-lag\"\n  }\n}\n"))
		_, out, _ := runPlan(t, srv, "web", "-f", spec)
		wantAll(t, out, `gate now: CLOSED (blocked_by_check): blocked by Consul check "replication-lag" (critical)`)
	})
	t.Run("stagger", func(t *testing.T) {
		srv := consultest.NewDev(t)
		planFleet(t, srv)
		putHolders(t, srv.Client(), `{"holders":{},"released":1}`)
		_, out, _ := runPlan(t, srv, "web", "-f", "testdata/plan-policy.json")
		wantAll(t, out, "gate now: CLOSED (stagger): stagger: next grant after 30s from the last release",
			"counted from this plan's first sight of the release", "(a hold: new grants wait)")
	})
	t.Run("a failure refused a node", func(t *testing.T) {
		srv := consultest.NewDev(t)
		planFleet(t, srv)
		code, out, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/plan-image.json")
		if code != 0 {
			t.Fatal(errs)
		}
		v2 := strings.SplitN(out, "\n", 2)[0]
		f, _ := json.Marshal(coordinator.Failure{Node: "n1", SHA: v2, Error: "new container is not healthy", At: time.Now()})
		k := groupkit.Keys(t, "web")
		if _, err := srv.Client().KV().Put(&api.KVPair{Key: k.Failure(v2, "n1"), Value: f}, nil); err != nil {
			t.Fatal(err)
		}
		if code, _, errs := runCLI(t, srv.HTTPAddr, "commit", "web", "-f", "testdata/web.json"); code != 0 {
			t.Fatal(errs)
		}
		_, out, _ = runPlan(t, srv, "web", "-f", "testdata/plan-image.json")
		wantAll(t, out, "nodes that would move: 2 of 3", "n1 will not move: a failure of this SHA is recorded for it: new container is not healthy")
	})
}

func wantAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Fatalf("plan lacks %q:\n%s", w, out)
		}
	}
}

// docFields are the field names in the first column of a doc's table.
func docFields(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, "| `"); ok {
			if name, _, ok := strings.Cut(f, "`"); ok {
				fields[name] = true
			}
		}
	}
	return fields
}

// jsonPaths are the paths of a document's leaves, as docs write them:
// "nodes.move[].node".
func jsonPaths(prefix string, v any) []string {
	switch v := v.(type) {
	case map[string]any:
		var out []string
		for k, x := range v {
			out = append(out, jsonPaths(join(prefix, k), x)...)
		}
		return out
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, jsonPaths(prefix+"[]", x)...)
		}
		if len(v) == 0 {
			out = append(out, prefix+"[]")
		}
		return out
	}
	return []string{prefix}
}

// documentedPath says path is documented, or a field it is part of is,
// whole: one whose parts the doc does not list (desired, as status has it).
func documentedPath(doc map[string]bool, path string) bool {
	for p := path; p != ""; {
		if doc[p] {
			return p == path || !slices.ContainsFunc(slices.Collect(maps.Keys(doc)), func(f string) bool {
				return strings.HasPrefix(f, p+".") || strings.HasPrefix(f, p+"[]")
			})
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return false
		}
		p = p[:i]
	}
	return false
}
