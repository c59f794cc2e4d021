package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// commitK commits a spec for web with max_parallel k that pauses on the
// first failure, and returns its SHA.
func commitK(t *testing.T, addr string, k int) string {
	t.Helper()
	spec := `{"name":"web","container":{"image":"rollagent-demo/web:v1"},
	  "update":{"max_parallel":` + itoa(k) + `,"failure_action":"pause","max_failures":1}}`
	return commitWebSpec(t, addr, "web.json", spec)
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// register puts node's instance of web's service in the catalog, as its
// agent does, and removes it when the test ends.
func register(t *testing.T, c *api.Client, node string) {
	t.Helper()
	id := coordinator.ServiceID("web", node)
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: coordinator.ServiceName("web")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Agent().ServiceDeregister(id) })
}

func putKV(t *testing.T, c *api.Client, key, value string) {
	t.Helper()
	if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
		t.Fatal(err)
	}
}

func webKeys(t *testing.T) coordinator.Keys {
	t.Helper()
	k, err := coordinator.NewKeys(coordinator.DefaultPrefix, "web")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A node whose agent stopped (its service deregistered) still counts, as
// gone from Consul, until the grace after its record's last write; then
// it is lost, no longer counts, and the live nodes' convergence is done.
func TestStatusShowsLostNodeAfterGrace(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	old := commitK(t, srv.HTTPAddr, 1)
	sha := commitK(t, srv.HTTPAddr, 2)
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	register(t, c, "n1")
	register(t, c, "n2")
	putNode(t, st, coordinator.NodeState{Node: "n1", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: time.Now()})
	putNode(t, st, coordinator.NodeState{Node: "n2", SHA: old, Desired: old, State: coordinator.StateConverged, Since: time.Now().Add(-13 * time.Minute)})

	if s := statusDoc(t, srv.HTTPAddr); s.Progress.Done || s.Progress.Total != 2 {
		t.Fatalf("n2 registered: progress %+v, want 1 of 2, not done", s.Progress)
	}
	if err := c.Agent().ServiceDeregister(coordinator.ServiceID("web", "n2")); err != nil {
		t.Fatal(err)
	}
	t.Run("past the grace", func(t *testing.T) {
		s := statusDoc(t, srv.HTTPAddr)
		n2 := s.Nodes[1]
		if n2.Node != "n2" || n2.CountedAs != coordinator.StandingLost || n2.Counts || n2.Consul != coordinator.PresenceGone {
			t.Errorf("n2 row %+v, want lost, gone, not counted", n2)
		}
		if p := s.Progress; !p.Done || p.Total != 1 || p.Converged != 1 || p.Lost != 1 || p.ByState[coordinator.StandingLost] != 1 {
			t.Errorf("progress %+v, want 1/1 converged, 1 lost, done", p)
		}
		statusTable(t, srv.HTTPAddr, "1/1 converged  1 lost (not counted)  done", "lost (was converged, gone from Consul)")
	})
	t.Run("within the grace", func(t *testing.T) {
		code, out, errs := runCLI(t, srv.HTTPAddr, "status", "web", "--lost-after", "20m")
		if code != 0 || !strings.Contains(out, "1/2 converged  1 behind") || !strings.Contains(out, "behind (says converged), gone from Consul") {
			t.Errorf("status --lost-after 20m: code %d, stderr %s\n%s", code, errs, out)
		}
	})
}

// The default grace of --lost-after is coordinator's.
func TestStatusLostAfterDefault(t *testing.T) {
	var cli CLI
	parser, err := newParser(&cli, &strings.Builder{}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse([]string{"status", "web"}); err != nil {
		t.Fatal(err)
	}
	if cli.Status.LostAfter != coordinator.DefaultLostAfter {
		t.Fatalf("--lost-after defaults to %s, want %s", cli.Status.LostAfter, coordinator.DefaultLostAfter)
	}
}

// The summary hides nothing: a paused fleet counts its failure, a closed
// gate names its state and the policy's K, a node stuck unknown keeps the
// rollout from done and from an "eta 0s", and a garbage record is a row.
func TestStatusHonestSummary(t *testing.T) {
	srv := consultest.NewDev(t)
	c := srv.Client()
	sha := commitK(t, srv.HTTPAddr, 2)
	backdateCommit(t, c, 10*time.Minute)
	st := coordinator.NewStore(c, coordinator.DefaultPrefix)
	k := webKeys(t)
	at := func(d time.Duration) time.Time { return time.Now().Add(-10*time.Minute + d) }
	putNode(t, st, coordinator.NodeState{Node: "n1", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: at(time.Minute)})
	putNode(t, st, coordinator.NodeState{Node: "n2", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: at(2 * time.Minute)})
	putNode(t, st, coordinator.NodeState{Node: "n3", SHA: sha, Desired: sha, State: coordinator.StateUnknown, Since: at(2 * time.Minute), Error: "docker: no answer"})

	t.Run("a node stuck unknown", func(t *testing.T) {
		out := statusTable(t, srv.HTTPAddr, "2/3 converged  1 unknown\n")
		if strings.Contains(out, "eta 0s") {
			t.Errorf("eta 0s with a node stuck:\n%s", out)
		}
		if s := statusDoc(t, srv.HTTPAddr); s.Progress.Done || s.Progress.ETA != nil {
			t.Errorf("progress %+v, want not done and no eta", s.Progress)
		}
	})
	t.Run("a garbage record is a row", func(t *testing.T) {
		putKV(t, c, k.Node("n0"), "{garbage")
		defer func() { _, _ = c.KV().Delete(k.Node("n0"), nil) }()
		statusTable(t, srv.HTTPAddr, "2/4 converged  1 unknown  1 invalid\n", "\nn0 ")
		s := statusDoc(t, srv.HTTPAddr)
		n0 := s.Nodes[0]
		if n0.Node != "n0" || n0.State != "invalid" || n0.CountedAs != coordinator.StandingInvalid || !strings.Contains(n0.Error, "not a valid record") {
			t.Errorf("row %+v, want n0 invalid with the decode error", n0)
		}
	})
	t.Run("a paused fleet with a failure", func(t *testing.T) {
		for _, n := range []string{"n1", "n2", "n3"} {
			putNode(t, st, coordinator.NodeState{Node: n, Desired: sha, State: coordinator.StatePaused, Since: time.Now(), Error: "paused"})
		}
		putKV(t, c, k.Failure(sha, "n1"), `{"node":"n1","sha":"`+sha+`","error":"unhealthy","at":"2026-01-01T00:00:00Z"}`)
		putKV(t, c, k.Pause(sha), `{"sha":"`+sha+`","failures":1,"reason":"1 failure(s) reached max_failures=1","at":"2026-01-01T00:00:00Z"}`)
		statusTable(t, srv.HTTPAddr, "0/3 converged  2 paused  1 failed\n", "gate CLOSED (paused): paused after 1 failure(s)", "max_parallel 2\n")
		s := statusDoc(t, srv.HTTPAddr)
		if s.Progress.Failed != 1 || s.Progress.ByState[coordinator.StandingPaused] != 2 || s.Gate.State != coordinator.GatePaused || s.Gate.MaxParallel != 2 {
			t.Errorf("progress %+v gate %+v, want 1 failed, 2 paused, gate paused at K=2", s.Progress, s.Gate)
		}
	})
	t.Run("a cancelled gate shows K", func(t *testing.T) {
		if code, _, errs := runCLI(t, srv.HTTPAddr, "cancel", "web", "--reason", "bad build"); code != 0 {
			t.Fatalf("cancel: %s", errs)
		}
		statusTable(t, srv.HTTPAddr, "gate CLOSED (cancelled): cancelled by ", ": bad build  max_parallel 2\n")
		if s := statusDoc(t, srv.HTTPAddr); s.Gate.State != coordinator.GateCancelled || s.Gate.MaxParallel != 2 || s.Gate.Open {
			t.Errorf("gate %+v, want cancelled at K=2", s.Gate)
		}
	})
}
