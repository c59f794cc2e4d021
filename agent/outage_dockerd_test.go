package agent_test

import (
	"testing"
	"time"

	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
)

// newDaemonFleet is a fleet whose agents and images live on a private
// Docker daemon, which the test may stop and start (never the machine's).
func newDaemonFleet(t *testing.T, group string, opts dockertest.DaemonOptions) (*fleet, *dockertest.Daemon) {
	t.Helper()
	d := dockertest.NewDaemon(t, opts)
	f := newFleetOn(t, group, consultest.NewDev(t), d.Client(t))
	f.env = []string{"DOCKER_HOST=" + d.Host}
	return f, d
}

// offline is f.spec without a network: the private daemon has no bridge.
// demoapp's health check asks 127.0.0.1, which a container has anyway.
func (f *fleet) offline(image string) *hashspec.Spec {
	s := f.spec(image, 1, "pause", 1)
	s.Container.NetworkMode = "none"
	return s
}

// The node's Docker daemon restarts (as a package upgrade would restart it)
// after the holder started its new container and before it is healthy. The
// daemon stops every container and, on its way back, starts again those
// with a restart policy (unless-stopped by default) that it had not been
// told to stop: the new one, not the old one the holder stopped. The
// holder cannot tell the new container's health while the daemon is away;
// that is not ill health. It keeps its slot, waits within healthy_deadline,
// and completes; a daemon's restart is not the release's failure.
func TestOutageDockerDaemonRestartMidReplacement(t *testing.T) {
	f, d := newDaemonFleet(t, "dockerd", dockertest.DaemonOptions{})
	ns := nodes(1)
	f.startDocker(ns[0])
	v1 := f.commit(f.offline(f.image("v1", nil)))
	f.waitFor(90*time.Second, "first deploy of v1", func() bool { return f.converged(ns, v1) })
	ev := f.recordEvents()
	cen := f.census(ns, true)
	// Healthy only 3s after it starts (its failing probes do not count
	// within start_period): the restart lands before that.
	slow := f.offline(f.image("v2", map[string]string{"DEMOAPP_UNHEALTHY_FOR": "3s"}))
	slow.Container.Healthcheck.StartPeriod = hashspec.Duration(10 * time.Second)
	v2 := f.commit(slow)
	ev.wait(t, 60*time.Second, 0, "the new container to start", func(e dockerEvent) bool {
		return e.action == "start" && e.sha == v2 && !e.aside()
	})
	start := time.Now()
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("private dockerd stopped and started again in %s", time.Since(start).Round(100*time.Millisecond))
	f.waitFor(2*time.Minute, "rollout to v2 after the daemon's restart", func() bool { return f.converged(ns, v2) })
	t.Logf("rollout completed %s after the restart began", time.Since(start).Round(100*time.Millisecond))
	cen.finish(t, 1)
	f.checkKV(v2, 2)
}
