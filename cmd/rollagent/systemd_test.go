package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/testkit"
)

const unitFile = "../../docs/examples/rollagent@.service"

// unit is what the test needs of a systemd unit for instance inst.
type unit struct {
	env      []string // Environment= lines
	envFiles []string // EnvironmentFile= paths
	exec     []string
	stop     time.Duration
	killMode string // KillMode=, "" if unset (systemd's default: control-group)
}

func readUnit(t *testing.T, path, inst string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var u unit
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.ReplaceAll(strings.TrimSpace(sc.Text()), "%i", inst), "=")
		switch {
		case !ok || strings.HasPrefix(k, "#"):
		case k == "Environment":
			u.env = append(u.env, v)
		case k == "EnvironmentFile":
			u.envFiles = append(u.envFiles, strings.TrimPrefix(v, "-"))
		case k == "ExecStart":
			u.exec = strings.Fields(v)
		case k == "KillMode":
			u.killMode = v
		case k == "TimeoutStopSec":
			// systemd spells minutes "min"; Go spells them "m".
			if u.stop, err = time.ParseDuration(strings.ReplaceAll(v, "min", "m")); err != nil {
				t.Fatalf("TimeoutStopSec=%s: %v", v, err)
			}
		}
	}
	if len(u.exec) == 0 || len(u.envFiles) != 1 || u.stop == 0 {
		t.Fatalf("%s: want ExecStart, one EnvironmentFile and TimeoutStopSec; got %+v", path, u)
	}
	return u
}

// verifyUnit runs systemd-analyze verify on the unit with ExecStart
// pointing at bin, which must exist for the check to pass.
func verifyUnit(t *testing.T, bin string) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		consultest.Unavailable(t, "systemd-analyze: %v", err)
	}
	body, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	text := strings.ReplaceAll(string(body), "/usr/local/bin/rollagent", bin)
	if err := os.WriteFile(filepath.Join(dir, "rollagent@.service"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sa, "verify", "./rollagent@web.service")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The documented unit, run as systemd would run rollagent@web with the
// token of the documented agent policy in its EnvironmentFile, converges
// against a default-deny Consul and stops cleanly on its KillSignal.
func TestSystemdUnitAgainstACLConsul(t *testing.T) {
	bin := dockertest.BuildBinary(t, "./cmd/rollagent")
	verifyUnit(t, bin)
	u := readUnit(t, unitFile, "web")
	srv := aclConsul(t)
	dir := t.TempDir()
	hook := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	envFile := strings.Join([]string{
		"CONSUL_HTTP_ADDR=" + srv.HTTPAddr,
		"CONSUL_HTTP_TOKEN=" + tokenFor(t, srv.Client(), "acl-policy.hcl", "web"),
		"ROLLAGENT_NODE=n1",
		"ROLLAGENT_RUNTIME=exec",
		"ROLLAGENT_STATE_DIR=" + dir,
		"ROLLAGENT_REPLACE_CMD=" + hook("replace", `cp "$ROLLAGENT_SPEC" "`+dir+`/installed.json"`),
		"ROLLAGENT_HEALTH_CMD=" + hook("health", `test -f "`+dir+`/installed.json"`),
	}, "\n")
	env := append([]string{"PATH=" + os.Getenv("PATH")}, u.env...)
	env = append(env, strings.Split(envFile, "\n")...) // what systemd reads from u.envFiles[0]

	cmd := exec.Command(bin, u.exec[1:]...)
	cmd.Env = env
	var logs testkit.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+rootToken, "commit", "web", "-f", "testdata/web.json"); code != 0 {
		t.Fatal(errs)
	}
	st := coordinator.NewStore(srv.Client(), "")
	if err := waitDone(st, "web", time.Minute); err != nil {
		t.Fatalf("%v; the agent's log:\n%s", err, logs.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("agent exited with %v after SIGTERM; log:\n%s", err, logs.String())
		}
	case <-time.After(u.stop):
		t.Fatalf("agent still running %s (TimeoutStopSec) after SIGTERM", u.stop)
	}
}

// The stop signal reaches the agent alone (KillMode=mixed), which then
// finishes or undoes its step; the rest of the unit, its hooks, gets
// SIGKILL only once the agent exits or at TimeoutStopSec. systemd's
// default, control-group, sent SIGTERM to every process of the unit: the
// hook under way died of it, and on 6d7f554 the agent recorded a failed
// release and paused the group (agent.TestStopMidHookCountsNoFailure).
func TestSystemdUnitStopsTheAgentAlone(t *testing.T) {
	if u := readUnit(t, unitFile, "web"); u.killMode != "mixed" {
		t.Fatalf("%s: KillMode=%q, want mixed", unitFile, u.killMode)
	}
}

// waitDone polls until every node of group runs the desired SHA.
func waitDone(st *coordinator.Store, group string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		if gs, err := st.Read(ctx, group, nil); err == nil && gs.Progress().Done && len(gs.Nodes) > 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("group %s did not converge within %s", group, d)
}
