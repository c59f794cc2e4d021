package dockertest_test

import (
	"context"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/rollagent/rollagent/internal/dockertest"
)

func TestCleanup(t *testing.T) {
	cli := dockertest.Client(t)
	// Registered first, so it runs last, after the image's own cleanup.
	t.Cleanup(func() { requireNothingLabelled(t, cli) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tag := dockertest.BuildGoImage(t, cli, demoappImage("keep", nil))

	var running, created, netID string
	t.Run("removes containers and networks", func(t *testing.T) {
		dockertest.Cleanup(t, cli)
		netID = createNetwork(t, ctx, cli)
		running = startContainer(t, ctx, cli, tag, netID)
		created = createContainer(t, ctx, cli, tag, "")
	})
	requireGone(t, "container", func() error { _, err := cli.ContainerInspect(ctx, running); return err })
	requireGone(t, "container", func() error { _, err := cli.ContainerInspect(ctx, created); return err })
	requireGone(t, "network", func() error { _, err := cli.NetworkInspect(ctx, netID, network.InspectOptions{}); return err })
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		t.Errorf("the parent test's image went with the subtest: %v", err)
	}

	var tag2, running2 string
	t.Run("image cleanup removes the image's containers first", func(t *testing.T) {
		// Cleanup before BuildGoImage: the image's cleanup runs first and
		// finds its container still running.
		dockertest.Cleanup(t, cli)
		tag2 = dockertest.BuildGoImage(t, cli, demoappImage("inuse", nil))
		running2 = startContainer(t, ctx, cli, tag2, "")
	})
	requireGone(t, "image", func() error { _, err := cli.ImageInspect(ctx, tag2); return err })
	requireGone(t, "container", func() error { _, err := cli.ContainerInspect(ctx, running2); return err })
}

func requireGone(t *testing.T, what string, inspect func() error) {
	t.Helper()
	if err := inspect(); !cerrdefs.IsNotFound(err) {
		t.Errorf("%s still there after cleanup (inspect: %v)", what, err)
	}
}

// requireNothingLabelled holds only while no other test of this process runs
// alongside: the label is per process.
func requireNothingLabelled(t *testing.T, cli *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := filters.NewArgs(filters.Arg("label", dockertest.Label+"="+dockertest.RunID()))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil || len(cs) > 0 {
		t.Errorf("labelled containers left: %d (%v)", len(cs), err)
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil || len(ns) > 0 {
		t.Errorf("labelled networks left: %d (%v)", len(ns), err)
	}
	is, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: f})
	if err != nil || len(is) > 0 {
		t.Errorf("labelled images left: %d (%v)", len(is), err)
	}
}
