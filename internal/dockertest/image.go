package dockertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// GoImage describes a FROM-scratch image holding one static Go binary.
type GoImage struct {
	Package     string            // package to build, relative to the module root: "./internal/demoapp"
	Binary      string            // name in the image, "demoapp" -> /demoapp; default: the package's last element
	Tag         string            // e.g. "rollagent-test/demoapp:v1"; BuildGoImage makes it unique per call
	Env         map[string]string // image ENV, e.g. DEMOAPP_VERSION=v2
	Cmd         []string          // image CMD, the arguments to the binary (the ENTRYPOINT)
	Healthcheck []string          // optional HEALTHCHECK CMD in exec form, e.g. {"/demoapp", "health"}
	// HealthStartPeriod is the HEALTHCHECK --start-period: failures in it do
	// not count, for workloads that are slow to start. Zero means none.
	HealthStartPeriod time.Duration
	Labels            map[string]string // added to Label=RunID()
	ExtraFiles        map[string][]byte // path in image -> content, e.g. a CA bundle
	// Defer registers the image's removal. Optional, defaults to t.Cleanup.
	// A harness whose agents outlive the test's body, and start containers
	// of the image again until they stop, passes one that runs after they
	// stop: removed before, the image would be left behind, in use.
	Defer func(remove func())
}

func (o GoImage) binary() string {
	if o.Binary != "" {
		return o.Binary
	}
	return path.Base(o.Package)
}

// Dockerfile renders the image's Dockerfile. Each instruction costs the
// legacy builder a container and a commit (about a second here) unless it is
// cached, so ENV, the part that differs between releases, comes last and is
// one instruction: releases of one binary then share every cached step
// before it. ImageFromBinaries appends the labels.
func (o GoImage) Dockerfile() (string, error) {
	bin, err := contextPath(o.binary())
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FROM scratch\nCOPY %s /%s\n", bin, bin)
	for _, p := range sortedKeys(o.ExtraFiles) {
		cp, err := contextPath(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "COPY %s /%s\n", cp, cp)
	}
	fmt.Fprintf(&b, "ENTRYPOINT %s\n", jsonArray([]string{"/" + bin}))
	if len(o.Cmd) > 0 {
		fmt.Fprintf(&b, "CMD %s\n", jsonArray(o.Cmd))
	}
	if hc := o.Healthcheck; len(hc) > 0 {
		if hc[0] == "CMD" { // tolerate Docker's own ["CMD", ...] spelling
			hc = hc[1:]
		}
		b.WriteString("HEALTHCHECK --interval=1s --timeout=1s --retries=2 ")
		if o.HealthStartPeriod > 0 {
			fmt.Fprintf(&b, "--start-period=%s ", o.HealthStartPeriod)
		}
		fmt.Fprintf(&b, "CMD %s\n", jsonArray(hc))
	}
	if len(o.Env) > 0 {
		b.WriteString("ENV")
		for _, k := range sortedKeys(o.Env) {
			v, err := envValue(k, o.Env[k])
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

func envValue(k, v string) (string, error) {
	if k == "" || strings.ContainsAny(k, "= \t\n\"'$\\") {
		return "", fmt.Errorf("ENV name %q is not usable in a Dockerfile", k)
	}
	q, err := quoteWord(v)
	if err != nil {
		return "", fmt.Errorf("ENV %s: %w", k, err)
	}
	return q, nil
}

// jsonArray is the exec form of CMD/ENTRYPOINT, which the builder neither
// expands nor passes to a shell (there is none in scratch).
func jsonArray(args []string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(args) // []string always encodes
	return strings.TrimSpace(buf.String())
}

var tagSeq atomic.Int64

// uniqueTag appends the run ID and a sequence number to the tag part, so a
// test's cleanup can never untag an image that a parallel test, or another
// package's test process, still uses under the same name.
func uniqueTag(tag, binary string) string {
	repo, ver := tag, "latest"
	if tag == "" {
		repo = "rollagent-test/" + strings.ToLower(binary)
	} else if i := strings.LastIndex(tag, ":"); i > strings.LastIndex(tag, "/") {
		repo, ver = tag[:i], tag[i+1:]
	}
	suffix := fmt.Sprintf("-%s-%d", RunID(), tagSeq.Add(1))
	if max := 128 - len(suffix); len(ver) > max {
		ver = ver[:max]
	}
	return repo + ":" + ver + suffix
}

// BuildGoImage builds opts.Package into a FROM-scratch image and returns the
// image's tag: opts.Tag with "-<RunID>-<n>" appended to its tag part. The
// image is removed when the test ends.
func BuildGoImage(t testing.TB, cli *client.Client, opts GoImage) string {
	t.Helper()
	bin := BuildBinary(t, opts.Package)
	dockerfile, err := opts.Dockerfile()
	if err != nil {
		t.Fatalf("image for %s: %v", opts.Package, err)
	}
	files := map[string]string{"/" + opts.binary(): bin}
	if len(opts.ExtraFiles) > 0 {
		dir := t.TempDir()
		for i, p := range sortedKeys(opts.ExtraFiles) {
			host := filepath.Join(dir, fmt.Sprint(i))
			if err := os.WriteFile(host, opts.ExtraFiles[p], 0o644); err != nil {
				t.Fatal(err)
			}
			files[p] = host
		}
	}
	tag := uniqueTag(opts.Tag, opts.binary())
	labels := map[string]string{}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	labels[Label] = RunID()
	// Makes every call's image distinct, so removing it can only ever hit
	// containers of this call.
	labels[Label+".image"] = tag

	remove := func() { removeImage(t, cli, tag) }
	if opts.Defer != nil {
		opts.Defer(remove)
	} else {
		t.Cleanup(remove)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := ImageFromBinaries(ctx, cli, tag, files, dockerfile, labels); err != nil {
		t.Fatal(err)
	}
	t.Logf("built image %s in %s", tag, time.Since(start).Round(time.Millisecond))
	return tag
}

// removeImage runs at the end of the test that built tag, which may come
// before Cleanup's container removal (cleanups run last-in first-out), so
// when the image is in use it removes this run's containers of the image
// first rather than leave the image behind.
func removeImage(t testing.TB, cli *client.Client, tag string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := image.RemoveOptions{PruneChildren: true}
	_, err := cli.ImageRemove(ctx, tag, opts)
	if cerrdefs.IsConflict(err) {
		f := filters.NewArgs(filters.Arg("label", Label+"="+RunID()), filters.Arg("ancestor", tag))
		removed, rerr := removeContainers(ctx, cli, f, time.Time{})
		if len(removed) > 0 {
			t.Logf("removed containers of image %s: %s", tag, strings.Join(removed, ", "))
		}
		if rerr != nil {
			t.Logf("removing containers of image %s: %v", tag, rerr)
		}
		_, err = cli.ImageRemove(ctx, tag, opts)
	}
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
	case cerrdefs.IsConflict(err):
		t.Logf("image %s left in place, still in use: %v", tag, err)
	default:
		t.Logf("removing image %s: %v", tag, err)
	}
}
