package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// runEnv runs the CLI in-process with Consul found only through the
// CONSUL_* environment, as an operator's shell or a systemd unit has it.
func runEnv(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// tlsEnv points the CLI at Consul's HTTPS address with caFile to verify it.
func tlsEnv(t *testing.T, addr, caFile string) {
	t.Setenv("CONSUL_HTTP_ADDR", addr)
	t.Setenv("CONSUL_CACERT", caFile)
	t.Setenv("CONSUL_HTTP_SSL_VERIFY", "true")
}

// execAgentArgs runs an agent for node n1 with the exec runtime in dir.
func execAgentArgs(dir string) []string {
	return []string{"run", "--group=web", "--node=n1", "--runtime=exec", "--state-dir=" + dir,
		"--replace-cmd=sh", "--replace-cmd=-c", "--replace-cmd=cp \"$ROLLAGENT_SPEC\" " + dir + "/installed.json",
		"--health-cmd=test", "--health-cmd=-f", "--health-cmd=" + dir + "/installed.json"}
}

// The CLI and an agent work against Consul over HTTPS, verified with the
// CA in CONSUL_CACERT.
func TestCLIAndAgentOverTLS(t *testing.T) {
	_, addr, ca := consultest.NewDevTLS(t)
	tlsEnv(t, addr, ca.CAFile)
	if code, _, errs := runEnv(t, "commit", "web", "-f", "testdata/web.json"); code != 0 {
		t.Fatalf("commit over TLS: %s", errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := &testkit.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, execAgentArgs(t.TempDir()), logs, logs) }()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("agent exited %d: %s", code, logs.String())
		}
	}()
	testkit.Eventually(t, time.Minute, "the agent to converge over TLS", func() bool {
		code, out, _ := runEnv(t, "status", "web", "-o", "json")
		var s struct {
			Progress struct{ Done bool } `json:"progress"`
		}
		return code == 0 && json.Unmarshal([]byte(out), &s) == nil && s.Progress.Done
	})
}

// A Consul whose certificate the configured CA did not sign is refused
// with an error that names TLS and the certificate, and nothing is written:
// not by the CLI, not by an agent.
func TestWrongCAIsRefusedAndWritesNothing(t *testing.T) {
	srv, addr, _ := consultest.NewDevTLS(t)
	commitWeb(t, srv.HTTPAddr) // over plain HTTP: something an agent would act on
	before := kvSnapshot(t, srv.Client())
	tlsEnv(t, addr, consultest.NewTLS(t).CAFile)
	for _, args := range [][]string{{"commit", "web", "-f", "testdata/web-v2.json"}, {"cancel", "web"}, {"status", "web"}} {
		code, _, errs := runEnv(t, args...)
		if code == 0 || !strings.Contains(errs, "TLS") || !strings.Contains(errs, "certificate") {
			t.Fatalf("%v with the wrong CA: code %d, stderr %q", args, code, errs)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs := &testkit.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, execAgentArgs(t.TempDir()), logs, logs) }()
	testkit.Eventually(t, 30*time.Second, "the agent to log the certificate error", func() bool {
		return strings.Contains(logs.String(), "certificate")
	})
	cancel()
	<-done
	if !strings.Contains(logs.String(), "TLS") {
		t.Fatalf("agent log does not name TLS:\n%s", logs.String())
	}
	kvUnchanged(t, srv.Client(), before)
	if ss, _, err := srv.Client().Session().List(nil); err != nil || len(ss) != 0 {
		t.Fatalf("sessions after the refused agent: %v %v", ss, err)
	}
}

// A CA file that does not exist is named, before anything is sent.
func TestMissingCAFileIsNamed(t *testing.T) {
	tlsEnv(t, "https://127.0.0.1:1", "no-such-ca.pem")
	code, _, errs := runEnv(t, "status", "web")
	if code == 0 || !strings.Contains(errs, "no-such-ca.pem") {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
}
