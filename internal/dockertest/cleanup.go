package dockertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// StaleAfter is the age past which SweepStale takes a labelled object to be
// left over from a crashed run; no test runs anywhere near this long.
const StaleAfter = time.Hour

// Cleanup registers a t.Cleanup that force-removes every container, then
// every network, labelled Label=RunID(), and logs what it removed. It runs
// whether the test passed or not.
//
// The label is per process, not per test: call Cleanup from a test whose
// cleanup runs after all tests that share its containers, not from one of
// several parallel tests.
func Cleanup(t testing.TB, cli *client.Client) {
	t.Helper()
	t.Cleanup(func() {
		// The test's own contexts may be done by now.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f := filters.NewArgs(filters.Arg("label", Label+"="+RunID()))
		removed, err := removeContainers(ctx, cli, f, time.Time{})
		if len(removed) > 0 {
			t.Logf("cleanup: removed containers %s", strings.Join(removed, ", "))
		}
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
		removed, err = removeNetworks(ctx, cli, f, time.Time{})
		if len(removed) > 0 {
			t.Logf("cleanup: removed networks %s", strings.Join(removed, ", "))
		}
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// SweepStale removes containers, networks and images labelled rollagent.test
// (any run) that are older than StaleAfter, and this package's temp dirs of
// the same age: what runs that crashed before their cleanups left behind.
// Call it from TestMain. It returns what it removed; it goes on past errors
// and returns them joined.
func SweepStale(ctx context.Context, cli *client.Client) ([]string, error) {
	cutoff := time.Now().Add(-StaleAfter)
	removed, err := sweep(ctx, cli, filters.NewArgs(filters.Arg("label", Label)), cutoff)
	dirs, derr := removeBinDirs(cutoff)
	return append(removed, dirs...), errors.Join(err, derr)
}

// sweep removes what f matches and was created before cutoff. Containers go
// first, since they hold networks and images in use.
func sweep(ctx context.Context, cli *client.Client, f filters.Args, cutoff time.Time) ([]string, error) {
	var removed []string
	var errs []error
	for _, remove := range []func(context.Context, *client.Client, filters.Args, time.Time) ([]string, error){
		removeContainers, removeNetworks, removeImages,
	} {
		r, err := remove(ctx, cli, f, cutoff)
		removed = append(removed, r...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// createdBefore treats a zero cutoff as "remove regardless of age".
func createdBefore(created, cutoff time.Time) bool {
	return cutoff.IsZero() || created.Before(cutoff)
}

func removeContainers(ctx context.Context, cli *client.Client, f filters.Args, cutoff time.Time) ([]string, error) {
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	var removed []string
	var errs []error
	for _, c := range list {
		if !createdBefore(time.Unix(c.Created, 0), cutoff) {
			continue
		}
		err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing container %s: %w", c.ID[:12], err))
			continue
		}
		removed = append(removed, containerName(c))
	}
	return removed, errors.Join(errs...)
}

func containerName(c container.Summary) string {
	name := c.ID[:12]
	if len(c.Names) > 0 {
		name = strings.TrimPrefix(c.Names[0], "/") + " (" + name + ")"
	}
	return name
}

func removeNetworks(ctx context.Context, cli *client.Client, f filters.Args, cutoff time.Time) ([]string, error) {
	list, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("listing networks: %w", err)
	}
	var removed []string
	var errs []error
	for _, n := range list {
		if !createdBefore(n.Created, cutoff) {
			continue
		}
		if err := cli.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing network %s: %w", n.Name, err))
			continue
		}
		removed = append(removed, "network "+n.Name)
	}
	return removed, errors.Join(errs...)
}

// removeImages removes by tag, without force: forcing would untag an image
// that a live container still runs and leave it dangling.
func removeImages(ctx context.Context, cli *client.Client, f filters.Args, cutoff time.Time) ([]string, error) {
	list, err := cli.ImageList(ctx, image.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	var removed []string
	var errs []error
	for _, img := range list {
		if !createdBefore(time.Unix(img.Created, 0), cutoff) {
			continue
		}
		refs := []string{}
		for _, tag := range img.RepoTags {
			if tag != "<none>:<none>" {
				refs = append(refs, tag)
			}
		}
		if len(refs) == 0 {
			refs = append(refs, img.ID)
		}
		for _, ref := range refs {
			_, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true})
			if err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("removing image %s: %w", ref, err))
				continue
			}
			removed = append(removed, "image "+ref)
		}
	}
	return removed, errors.Join(errs...)
}

func removeBinDirs(cutoff time.Time) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, d := range dirs {
		st, err := os.Stat(d)
		mine := strings.Contains(filepath.Base(d), RunID())
		if err != nil || !st.IsDir() || mine || !st.ModTime().Before(cutoff) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, d)
	}
	return removed, errors.Join(errs...)
}
