package agent

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// A replace hook that a killed agent left running makes the workload
// unhealthy whatever the health hook says, so that a node under a closed
// gate keeps its slot instead of releasing it while the hook may still
// change what runs; the hook this process runs itself does not, and once
// the left hook is gone the health hook decides again.
func TestExecHookLeftRunningIsNotHealthy(t *testing.T) {
	e := &Exec{HealthCmd: []string{"true"}, StateDir: t.TempDir(), Group: "web", Node: "n1", Log: hclog.NewNullLogger()}
	left := exec.CommandContext(context.Background(), "sleep", "60")
	left.Env = append(os.Environ(), "ROLLAGENT_GROUP=web", "ROLLAGENT_NODE=n1")
	inOwnGroup(left)
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := left.Process.Pid
	t.Cleanup(func() { _ = reapGroup(pgid); _ = left.Wait() })
	if err := e.save(execState{SHA: "v1", Pending: "v2", Hook: pgid}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if ok, why := e.Healthy(ctx); ok || !strings.Contains(why, "still runs") {
		t.Fatalf("Healthy = %v, %q with a replace hook left running; want not healthy, naming it", ok, why)
	}
	e.running.Store(int64(pgid))
	if ok, why := e.Healthy(ctx); !ok {
		t.Fatalf("Healthy = false (%s) while this process runs the hook itself", why)
	}
	e.running.Store(0)
	if err := e.killLeft(execState{Hook: pgid}); err != nil {
		t.Fatal(err)
	}
	if ok, why := e.Healthy(ctx); !ok {
		t.Fatalf("Healthy = false (%s) once the left hook is gone", why)
	}
}
