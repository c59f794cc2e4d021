package dockertest

import (
	"context"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// TestSweep cannot wait an hour for things to go stale, so it moves the
// cutoff instead, on objects under a label value of its own: a sweep of every
// rollagent.test object with a future cutoff would wreck the test runs of
// whoever else shares this Docker engine.
func TestSweep(t *testing.T) {
	cli := Client(t)
	Cleanup(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fake := RunID() + "-sweep"
	ctrID, netID, tag := makeObjects(t, ctx, cli, fake)
	// Labelled with this run, not the fake one: the sweep must leave it.
	live, err := cli.NetworkCreate(ctx, "rollagent-test-"+RunID()+"-live", network.CreateOptions{Labels: Labels()})
	if err != nil {
		t.Fatal(err)
	}

	f := filters.NewArgs(filters.Arg("label", Label+"="+fake))
	removed, err := sweep(ctx, cli, f, time.Now().Add(-StaleAfter))
	if err != nil || len(removed) > 0 {
		t.Fatalf("sweep of new objects removed %q (err %v), want nothing", removed, err)
	}
	removed, err = sweep(ctx, cli, f, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("swept %s", strings.Join(removed, ", "))
	if len(removed) != 3 {
		t.Errorf("swept %q, want the container, the network and the image", removed)
	}
	for what, err := range map[string]error{
		"container": inspectErr(cli.ContainerInspect(ctx, ctrID)),
		"network":   inspectErr(cli.NetworkInspect(ctx, netID, network.InspectOptions{})),
		"image":     inspectErr(cli.ImageInspect(ctx, tag)),
	} {
		if !cerrdefs.IsNotFound(err) {
			t.Errorf("stale %s survived the sweep (inspect: %v)", what, err)
		}
	}
	if _, err := cli.NetworkInspect(ctx, live.ID, network.InspectOptions{}); err != nil {
		t.Errorf("the sweep took another run's network: %v", err)
	}

	// The real thing, over every run's objects: here it may only find what
	// crashed runs left, never this run's.
	if _, err := SweepStale(ctx, cli); err != nil {
		t.Errorf("SweepStale: %v", err)
	}
	if _, err := cli.NetworkInspect(ctx, live.ID, network.InspectOptions{}); err != nil {
		t.Errorf("SweepStale took a new network: %v", err)
	}
}

// makeObjects makes a running container, a network and an image, all
// labelled Label=value, and returns them.
func makeObjects(t *testing.T, ctx context.Context, cli *client.Client, value string) (ctrID, netID, tag string) {
	t.Helper()
	labels := map[string]string{Label: value}
	tag = "rollagent-test/sweep:" + value
	t.Cleanup(func() { removeImage(t, cli, tag) }) // in case the sweep fails
	bin := BuildBinary(t, "./internal/demoapp")
	if err := ImageFromBinaries(ctx, cli, tag, map[string]string{"/demoapp": bin},
		"FROM scratch\nCOPY demoapp /demoapp\nENTRYPOINT [\"/demoapp\"]\n", labels); err != nil {
		t.Fatal(err)
	}
	ctr, err := cli.ContainerCreate(ctx, &container.Config{Image: tag}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStart(ctx, ctr.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := cli.NetworkCreate(ctx, "rollagent-test-"+value, network.CreateOptions{Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	return ctr.ID, n.ID, tag
}

func inspectErr[T any](_ T, err error) error { return err }
