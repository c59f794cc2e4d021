package integration

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// TestPullRegistry checks the nemesis's registry against the real Docker:
// the daemon pulls a pushed image from it (it resolves the registry's
// loopback address in the test process's own network namespace), and a
// stalled registry holds the pull until the stall ends.
func TestPullRegistry(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.Cleanup(t, cli)
	c := &cluster{t: t, docker: cli}
	rel := fleettest.NewReleases(t, cli, "rollagent-it/demoapp-reg")
	local := rel.Image("v1", nil)
	r := c.registry()
	ref, err := r.push(local, "smoke-"+dockertest.RunID()[:8])
	if err != nil {
		t.Fatal(err)
	}
	r.stall(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rc, err := cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	_, err = io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		t.Fatalf("after the pull, %s is not in Docker: %v", ref, err)
	}
	if r.stalled.Load() == 0 {
		t.Fatalf("the pull of %s never met the stall", ref)
	}
}
