package agent_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A change to the update policy alone gives a new SHA, and every node's
// agent replaces its workload to take it up: the replace hook runs again on
// each node, for the same image. `rollagent plan` says so before the commit,
// and exits 2.
func TestPolicyOnlyChangeReplacesEveryNode(t *testing.T) {
	ef := newExecFleet(t, "policy")
	ns := nodes(2)
	for _, n := range ns {
		ef.start(n)
	}
	v1 := ef.commit(ef.spec("v1", 1, "10s", nil))
	ef.waitFor(60*time.Second, "v1 installed on every node", func() bool { return ef.converged(ns, v1) })

	policy := ef.spec("v1", 2, "10s", nil)
	canon, err := policy.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(path, canon, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ef.bin, "--consul-addr="+ef.srv.HTTPAddr, "plan", ef.group, "-f", path).Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("plan: %v, want exit 2:\n%s", err, out)
	}
	for _, want := range []string{"update.max_parallel: 1 → 2", "nodes that would move: 2 of 2", "only the update policy changed"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("plan lacks %q:\n%s", want, out)
		}
	}

	v2 := ef.commit(policy)
	ef.waitFor(60*time.Second, "the policy's SHA installed on every node", func() bool { return ef.converged(ns, v2) })
	for _, n := range ns {
		var shas []string
		for _, r := range ef.hookRuns(n) {
			shas = append(shas, r.sha)
		}
		if len(shas) != 2 || shas[0] != v1 || shas[1] != v2 {
			t.Errorf("node %s: replace hook runs %.12q, want one for v1 and one for the policy's SHA", n, shas)
		}
	}
}
