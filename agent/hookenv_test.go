package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/hashspec"
)

// An agent run as the shipped unit runs it, with its Consul token in
// CONSUL_HTTP_TOKEN, must not hand the token to its hooks, nor anything
// else of its environment but PATH.
func TestHookEnvHasNoToken(t *testing.T) {
	ef := newExecFleet(t, "hookenv")
	ef.env = []string{"CONSUL_HTTP_TOKEN=secret-agent-token", "HOOKTEST_OTHER=x"}
	dump := filepath.Join(ef.dir, "env.txt")
	replace, health := ef.hooks("env >'" + dump + "'")
	ef.procs["n1"] = ef.startArgs("n1", "--runtime=exec", "--state-dir="+ef.stateDir("n1"),
		"--replace-cmd=sh", "--replace-cmd=-c", "--replace-cmd="+replace,
		"--health-cmd=sh", "--health-cmd=-c", "--health-cmd="+health)
	sha := ef.commit(ef.spec("v1", 1, "10s", nil))
	ef.waitFor(60*time.Second, "v1 installed", func() bool { return ef.installed("n1", sha) })
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.Contains(kv, "secret-agent-token") || strings.HasPrefix(name, "CONSUL_") || name == "HOOKTEST_OTHER" {
			t.Errorf("the replace hook got %q from the agent's environment", kv)
		}
	}
	for _, want := range []string{"ROLLAGENT_GROUP=" + ef.group, "ROLLAGENT_NODE=n1", "ROLLAGENT_SHA=" + sha} {
		if !slices.Contains(env, want) {
			t.Errorf("the replace hook's environment has no %s: %q", want, env)
		}
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		t.Errorf("the replace hook's environment has no PATH: %q", env)
	}
}

// What the operator passes through reaches the hooks; nothing else does.
func TestHookEnvPassThrough(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, "env.txt")
	t.Setenv("HOOKTEST_KEEP", "kept")
	t.Setenv("HOOKTEST_DROP", "dropped")
	t.Setenv("CONSUL_HTTP_TOKEN", "secret-agent-token")
	e := &agent.Exec{ReplaceCmd: []string{"sh", "-c", "env >'" + dump + "'"}, HealthCmd: []string{"true"},
		StateDir: dir, Group: "g", Node: "n1", Log: hclog.NewNullLogger(),
		PassEnv: []string{"HOOKTEST_KEEP", "HOOKTEST_UNSET"}}
	spec, sha, err := hashspec.Load([]byte(`{"container":{"image":"example.com/app:1"}}`), hashspec.FormatJSON, "spec")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Prepare(ctx, spec, sha); err != nil {
		t.Fatal(err)
	}
	if err := e.Replace(ctx, spec, sha, func(context.Context, string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, kv := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	slices.Sort(names)
	// sh itself adds PWD (and may add SHLVL, _): the hook's own.
	names = slices.DeleteFunc(names, func(n string) bool { return n == "PWD" || n == "SHLVL" || n == "_" || n == "OLDPWD" })
	want := []string{"HOOKTEST_KEEP", "PATH", "ROLLAGENT_GROUP", "ROLLAGENT_NODE", "ROLLAGENT_SHA", "ROLLAGENT_SPEC"}
	if !slices.Equal(names, want) {
		t.Errorf("hook environment has %q, want %q", names, want)
	}
}

func TestCheckHookEnv(t *testing.T) {
	for _, tc := range []struct {
		names []string
		ok    bool
	}{
		{nil, true},
		{[]string{"HTTP_PROXY", "LANG"}, true},
		{[]string{"CONSUL_HTTP_TOKEN"}, false},
		{[]string{"LANG", "consul_http_addr"}, false},
		{[]string{"CONSUL_CACERT"}, false},
		{[]string{"ROLLAGENT_TOKEN"}, false},
		{[]string{"PATH"}, false},
		{[]string{"A=B"}, false},
		{[]string{""}, false},
	} {
		t.Run(strings.Join(tc.names, ","), func(t *testing.T) {
			err := agent.CheckHookEnv(tc.names)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, agent.ErrHookEnv)) {
				t.Errorf("CheckHookEnv(%q) = %v, want ok=%v", tc.names, err, tc.ok)
			}
		})
	}
}
