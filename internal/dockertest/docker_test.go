package dockertest_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/rollagent/rollagent/internal/dockertest"
)

// TestMain sweeps what crashed earlier runs left; without Docker the tests
// themselves skip or fail, so the sweep stays quiet.
func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if cli, err := dockertest.Connect(ctx); err == nil {
		removed, err := dockertest.SweepStale(ctx, cli)
		for _, r := range removed {
			fmt.Fprintln(os.Stderr, "dockertest: swept stale", r)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "dockertest: sweep:", err)
		}
		cli.Close()
	}
	cancel()
	os.Exit(m.Run())
}

func demoappImage(version string, env map[string]string) dockertest.GoImage {
	e := map[string]string{"DEMOAPP_VERSION": version}
	for k, v := range env {
		e[k] = v
	}
	return dockertest.GoImage{
		Package:     "./internal/demoapp",
		Binary:      "demoapp",
		Tag:         "rollagent-test/demoapp:" + version,
		Env:         e,
		Cmd:         []string{"serve"},
		Healthcheck: []string{"/demoapp", "health"},
	}
}

func createNetwork(t *testing.T, ctx context.Context, cli *client.Client) string {
	t.Helper()
	name := "rollagent-test-" + dockertest.RunID() + "-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	resp, err := cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Labels: dockertest.Labels()})
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	return resp.ID
}

// startContainer runs image on netID (none when empty); cmd replaces the
// image's CMD when given.
func startContainer(t *testing.T, ctx context.Context, cli *client.Client, image, netID string, cmd ...string) string {
	t.Helper()
	id := createContainer(t, ctx, cli, image, netID, cmd...)
	if err := cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		t.Fatalf("start container of %s: %v", image, err)
	}
	return id
}

func createContainer(t *testing.T, ctx context.Context, cli *client.Client, image, netID string, cmd ...string) string {
	t.Helper()
	host := &container.HostConfig{}
	if netID != "" {
		host.NetworkMode = container.NetworkMode(netID)
	}
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: cmd, Labels: dockertest.Labels()}, host, nil, nil, "")
	if err != nil {
		t.Fatalf("create container of %s: %v", image, err)
	}
	return resp.ID
}

// runToExit runs image with cmd and returns its exit code and stdout: a
// scratch image has no shell to exec into, so a second container is the way
// to ask the binary anything.
func runToExit(t *testing.T, ctx context.Context, cli *client.Client, image string, cmd ...string) (int64, string) {
	t.Helper()
	id := startContainer(t, ctx, cli, image, "", cmd...)
	waitc, errc := cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	var code int64
	select {
	case w := <-waitc:
		code = w.StatusCode
	case err := <-errc:
		t.Fatalf("wait for %s %v: %v", image, cmd, err)
	}
	logs, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, logs); err != nil {
		t.Fatal(err)
	}
	if stderr.Len() > 0 {
		t.Logf("%s %v stderr: %s", image, cmd, stderr.String())
	}
	return code, stdout.String()
}

// TestDemoappReleases is the shape of a rollout: one binary, two images that
// differ only in ENV, both healthy on one network.
func TestDemoappReleases(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.Cleanup(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	netID := createNetwork(t, ctx, cli)
	// Both built before either is used: while v1 exists, v2 reuses its cached
	// steps, which halves the build on this engine.
	versions := []string{"v1", "v2"}
	tags := map[string]string{}
	for _, v := range versions {
		tags[v] = dockertest.BuildGoImage(t, cli, demoappImage(v, nil))
	}

	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			tag := tags[version]
			id := startContainer(t, ctx, cli, tag, netID)
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			defer wcancel()
			start := time.Now()
			if err := dockertest.WaitHealthy(wctx, cli, id); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s healthy after %s", tag, time.Since(start).Round(time.Millisecond))

			code, out := runToExit(t, ctx, cli, tag, "--version")
			if code != 0 || strings.TrimSpace(out) != version {
				t.Errorf("--version: exit %d, printed %q; want 0 and %q", code, out, version)
			}
		})
	}
}

// TestImageConfig checks what the builder made of GoImage: quoting that
// survives the Dockerfile, labels, the HEALTHCHECK timings and extra files.
func TestImageConfig(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.Cleanup(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tricky := `a "b" $HOME \x <&>`
	opts := demoappImage("v3", map[string]string{"TRICKY": tricky})
	opts.Labels = map[string]string{"app name": tricky, dockertest.Label: "overridden?"}
	opts.ExtraFiles = map[string][]byte{"/etc/rollagent/hello.txt": []byte("hi\n")}
	tag := dockertest.BuildGoImage(t, cli, opts)

	img, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg := img.Config
	if got := cfg.Labels[dockertest.Label]; got != dockertest.RunID() {
		t.Errorf("label %s = %q, want the run ID %q", dockertest.Label, got, dockertest.RunID())
	}
	if cfg.Labels["app name"] != tricky {
		t.Errorf("labels = %q, want %q=%q too", cfg.Labels, "app name", tricky)
	}
	if !contains(cfg.Env, "TRICKY="+tricky) || !contains(cfg.Env, "DEMOAPP_VERSION=v3") {
		t.Errorf("env = %q, want TRICKY=%s and DEMOAPP_VERSION=v3", cfg.Env, tricky)
	}
	if hc := cfg.Healthcheck; hc == nil || hc.Interval != time.Second || hc.Timeout != time.Second || hc.Retries != 2 ||
		strings.Join(hc.Test, " ") != "CMD /demoapp health" {
		t.Errorf("healthcheck = %+v, want CMD /demoapp health every 1s, timeout 1s, 2 retries", hc)
	}
	if strings.Join(cfg.Entrypoint, " ") != "/demoapp" || strings.Join(cfg.Cmd, " ") != "serve" {
		t.Errorf("entrypoint %q cmd %q, want /demoapp serve", cfg.Entrypoint, cfg.Cmd)
	}

	// A created container is enough to read files: scratch has no cat.
	id := createContainer(t, ctx, cli, tag, "")
	rc, _, err := cli.CopyFromContainer(ctx, id, "/etc/rollagent/hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(tr); string(b) != "hi\n" {
		t.Errorf("extra file holds %q, want %q", b, "hi\n")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
