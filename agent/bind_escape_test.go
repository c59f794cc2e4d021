package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// Docker resolves a bind source again at every start. A workload that can
// write a directory on the path of a bind source (its own spec's, or
// another container's) replaces it with a symlink out of --allow-bind and
// exits; the restart policy starts the container again, through the link.
// The agent must refuse such a spec before anything runs: with real
// Docker, a restart policy and a container that plants the link, nothing
// may ever be written outside the allowed prefix.
func TestBindCannotEscapeAtRestart(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.Cleanup(t, cli)
	img := dockertest.BuildGoImage(t, cli, dockertest.GoImage{Package: "./internal/bindplant", Tag: "rollagent-test/bindplant:v1"})

	t.Run("its own spec mounts the parent read-write", func(t *testing.T) {
		allowed, outside := bindDirs(t)
		spec := plantSpec(img, "always", []string{"-touch", "/x", "-plant", "/web/x", "-target", outside},
			hashspec.Volume{Type: "bind", Source: allowed, Target: "/web"},
			hashspec.Volume{Type: "bind", Source: filepath.Join(allowed, "x"), Target: "/x"})
		group := fleettest.Group("bindown")
		err := deployDirect(t, cli, group, spec, agent.Allow{BindPrefixes: []string{allowed}})
		mustRefuseNesting(t, cli, err, outside, group)
	})

	t.Run("another container mounts the parent read-write", func(t *testing.T) {
		allowed, outside := bindDirs(t)
		allow := agent.Allow{BindPrefixes: []string{allowed}}
		planter := plantSpec(img, "no", []string{"-plant", "/web/x", "-target", outside, "-stay"},
			hashspec.Volume{Type: "bind", Source: allowed, Target: "/web"})
		if err := deployDirect(t, cli, fleettest.Group("bindplanter"), planter, allow); err != nil {
			t.Fatalf("the planter, which binds only the prefix, was refused: %v", err)
		}
		group := fleettest.Group("bindvictim")
		victim := plantSpec(img, "always", []string{"-touch", "/x"},
			hashspec.Volume{Type: "bind", Source: filepath.Join(allowed, "x"), Target: "/x"})
		err := deployDirect(t, cli, group, victim, allow)
		mustRefuseNesting(t, cli, err, outside, group)
	})
}

// bindDirs makes an allowed prefix holding x/, and a directory outside it.
func bindDirs(t *testing.T) (allowed, outside string) {
	root := t.TempDir()
	allowed, outside = filepath.Join(root, "allowed"), filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(allowed, "x"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return allowed, outside
}

func plantSpec(img, restart string, cmd []string, vols ...hashspec.Volume) *hashspec.Spec {
	return &hashspec.Spec{Container: hashspec.Container{Image: img, Cmd: cmd, Restart: restart, NetworkMode: "none", Volumes: vols}}
}

// deployDirect does what an agent does with a committed spec on its node:
// the allow check, then the runtime's Prepare and Replace.
func deployDirect(t *testing.T, cli *client.Client, group string, spec *hashspec.Spec, allow agent.Allow) error {
	t.Helper()
	if err := allow.Check(spec); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := agent.NewDocker(cli, group, "n1", dockertest.Labels(), hclog.NewNullLogger())
	if err := d.Prepare(ctx, spec, "sha-"+group); err != nil {
		return err
	}
	return d.Replace(ctx, spec, "sha-"+group, func(context.Context, string) error { return nil })
}

// mustRefuseNesting fails unless err refuses the spec for a nested bind
// and nothing of group is left; a spec that was let through is given time
// to restart through the link, and what it wrote outside is reported.
func mustRefuseNesting(t *testing.T, cli *client.Client, err error, outside, group string) {
	t.Helper()
	if err == nil {
		if written := filepath.Join(outside, "ready"); waitForFile(written, 30*time.Second) {
			t.Fatalf("the spec was let through, and after its restart the container wrote %s, outside --allow-bind", written)
		}
		t.Fatal("the spec was let through (nothing written outside --allow-bind within 30s)")
	}
	if !strings.Contains(err.Error(), "lies inside") {
		t.Fatalf("refused with %v, want the nested bind named", err)
	}
	t.Logf("refused: %v", err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, lerr := cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", agent.LabelGroup+"="+group))})
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(list) > 0 {
		t.Fatalf("a refused spec left %d container(s)", len(list))
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Fatalf("something was written outside --allow-bind: %v", entries)
	}
}

// waitForFile says whether path appeared within d, polling (bounded).
func waitForFile(path string, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return true
		} else if !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return false
}
