package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

// The node's disk fills up (the private daemon's data root is a small
// tmpfs) when a release comes whose image is already there. Filled to the
// last byte, not even the first step (setting the old container aside)
// can be taken; with a little room left, the old container is set aside
// and stopped, the new one cannot be created, and the copy that failed
// leaves no room to start the old one again. Either way the failure is
// recorded, naming the cause (max_failures=1: the rollout pauses); the
// agent keeps trying to restore, and once there is room again the node is
// back on its old container, the very same one, by itself. Resume then
// completes the rollout.
func TestOutageDiskFullMidReplacement(t *testing.T) {
	f, d := newDaemonFleet(t, "diskfull", dockertest.DaemonOptions{DataSize: 160 << 20})
	ns := nodes(1)
	f.startDocker(ns[0])
	v1 := f.commit(f.offline(f.image("v1", nil)))
	f.waitFor(90*time.Second, "first deploy of v1", func() bool { return f.converged(ns, v1) })
	spec := f.offline(f.image("v2", nil)) // built, so present, before the disk fills
	before := f.containerIDs()
	cen := f.census(ns, true)
	var v2 string
	for _, c := range []struct {
		room  int64  // bytes left free
		cause string // the step that fails
	}{{0, "rename old container"}, {2 << 20, "create container"}} {
		free := fillDisk(t, d.DataRoot, c.room)
		if v2 == "" {
			v2 = f.commit(spec)
		} else {
			f.resume()
		}
		// What `rollagent status -o json` shows: the pause and the
		// failure with its cause.
		f.waitFor(60*time.Second, "a failure naming "+c.cause, func() bool {
			gs := f.state()
			return gs.Pause != nil && len(gs.Failures) == 1 && strings.Contains(gs.Failures[0].Error, c.cause) &&
				strings.Contains(gs.Failures[0].Error, "no space left on device")
		})
		n := f.state().Nodes[0]
		t.Logf("%d bytes free: n1 %s: %.200s", c.room, n.State, n.Error)
		free()
		f.waitFor(30*time.Second, "n1 back on its old container", func() bool {
			return f.running(ns, v1) && slices.Equal(f.containerIDs(), before)
		})
	}
	cen.finish(t, 1)
	f.resume()
	f.waitFor(time.Minute, "rollout to v2 after resume", func() bool { return f.converged(ns, v2) })
}

func (f *fleet) resume() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.store.Resume(ctx, f.group); err != nil {
		f.t.Fatal(err)
	}
}

// fillDisk fills the filesystem at dir with one file up to room bytes from
// full, and returns a func that removes the file.
func fillDisk(t *testing.T, dir string, room int64) func() {
	t.Helper()
	path := filepath.Join(dir, "fill")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var written int64
	for _, size := range []int{1 << 20, 4 << 10, 1} {
		buf := make([]byte, size)
		for i := 0; i < 1<<20; i++ { // bounded: 1 TiB at the largest size
			n, err := fh.Write(buf)
			written += int64(n)
			if err != nil {
				break
			}
		}
	}
	if err := fh.Truncate(max(written-room, 0)); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	free := func() { once.Do(func() { _ = os.Remove(path) }) }
	t.Cleanup(free)
	return free
}
