package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/testkit"
)

// An idle agent waits on blocking queries; it must not poll, neither before
// anything is committed nor once converged.
func TestIdleAgentDoesNotPoll(t *testing.T) {
	srv := consultest.NewDev(t)
	c, ct := testkit.CountedClient(srv)
	dir := t.TempDir()
	rt := &agent.Exec{ReplaceCmd: []string{"sh", "-c", "cp \"$ROLLAGENT_SPEC\" " + dir + "/installed.json"},
		HealthCmd: []string{"test", "-f", dir + "/installed.json"}, StateDir: dir, Group: "web", Node: "n1"}
	a, err := agent.New(agent.Config{Group: "web", Node: "n1", Store: coordinator.NewStore(c, ""), Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	requestsIn3s(t, ct, "with nothing committed")
	st := coordinator.NewStore(srv.Client(), "")
	spec, _, err := hashspec.Load([]byte(`{"name":"web","container":{"image":"demo:v1"},"update":{"min_healthy_time":"1s"}}`),
		hashspec.FormatJSON, "spec")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Commit(ctx, "web", spec, "test", "commit"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the agent to converge", func() bool {
		gs, err := st.Read(ctx, "web", nil)
		return err == nil && gs.Progress().Done
	})
	requestsIn3s(t, ct, "once converged")
}

// requestsIn3s counts what the agent asks of Consul over an observation
// window (not a synchronisation) while there is nothing for it to do.
func requestsIn3s(t *testing.T, ct *testkit.Counter, when string) {
	t.Helper()
	start := ct.Total()
	time.Sleep(3 * time.Second)
	if n := ct.Total() - start; n > 10 {
		t.Fatalf("%d requests in 3s %s: the agent polls", n, when)
	}
}
