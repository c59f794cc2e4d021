package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
)

// An agent killed while it verified Y, with X set aside, comes back to a
// new workload that passes its first health reading and fails after. It
// must verify Y for min_healthy_time before it drops X: so it finds Y
// failing, counts the failure and brings X back. On d2778cf (issue 20)
// Recover kept Y after one passing reading and removed X at once, so the
// node converged on a release that then failed.
func TestInterruptedVerifyTakesMoreThanOneReading(t *testing.T) {
	ef := newInProcExecFleet(t, "reading")
	rt := ef.runtime("n1", "")
	mode := filepath.Join(t.TempDir(), "health-mode")
	// Passes until the time in the mode file (unix ns), or always if none.
	rt.HealthCmd = []string{"sh", "-c", fmt.Sprintf(`until=$(cat '%s' 2>/dev/null || echo 0)
		[ "$until" -eq 0 ] || [ "$(date +%%s%%N)" -lt "$until" ]`, mode)}
	first := startAgent(t, ef.store, ef.group, "n1", rt, agent.Allow{})
	x := ef.commit(ef.spec("x", 1, "5s", nil))
	ef.waitFor(time.Minute, "n1 converged on x", func() bool { return ef.converged([]string{"n1"}, x) })
	first.stop(t)

	// What the agent killed while verifying y left: x set aside, y's hook
	// run to its end, and its record verifying y.
	y := ef.commit(slowVerifySpec(t, ef.group, "y"))
	state := fmt.Sprintf(`{"sha":%q,"pending":%q,"ran":true}`, x, y)
	if err := os.WriteFile(filepath.Join(ef.stateDir("n1"), ef.group+"-n1.json"), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := coordinator.NodeState{Node: "n1", SHA: y, Desired: y, State: coordinator.StateVerifying, Since: time.Now()}
	if err := ef.store.PutNode(ctx, ef.group, rec); err != nil {
		t.Fatal(err)
	}
	// Healthy for 4 s from now, half of min_healthy_time: any one reading
	// in that time passes, and a verification cannot.
	until := time.Now().Add(4 * time.Second).UnixNano()
	if err := os.WriteFile(mode, []byte(strconv.FormatInt(until, 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	startAgent(t, ef.store, ef.group, "n1", rt, agent.Allow{})
	ef.waitFor(time.Minute, "n1's failure to reach y recorded, and x back", func() bool {
		if sha, _ := ef.execState("n1"); sha == y {
			t.Fatal("n1 dropped x for y before y passed min_healthy_time")
		}
		sha, pending := ef.execState("n1")
		return hasFailure(ef.store, ef.group, "n1", y) && sha == x && pending == ""
	})
}

// slowVerifySpec is release's exec spec with a min_healthy_time of 8 s,
// within a healthy_deadline of 15 s.
func slowVerifySpec(t *testing.T, group, release string) *hashspec.Spec {
	t.Helper()
	js := fmt.Sprintf(`{"name":%q,"container":{"image":"example.com/app:%s"},"update":{"max_parallel":1,
		"min_healthy_time":"8s","healthy_deadline":"15s","failure_action":"pause","max_failures":1}}`, group, release)
	s, _, err := hashspec.Load([]byte(js), hashspec.FormatJSON, "exec spec")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hasFailure says Consul holds node's failure record for sha.
func hasFailure(st *coordinator.Store, group, node, sha string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := st.Read(ctx, group, nil)
	if err != nil {
		return false
	}
	for _, f := range gs.Failures {
		if f.Node == node && f.SHA == sha {
			return true
		}
	}
	return false
}
