package dockertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// binDirPrefix names this package's temp dirs, so SweepStale can find the
// ones that crashed runs left behind.
const binDirPrefix = "rollagent-dockertest-"

type builtBinary struct {
	once sync.Once
	path string
	err  error
}

var (
	binaries sync.Map // package path -> *builtBinary
	binDir   = sync.OnceValues(func() (string, error) {
		return os.MkdirTemp("", binDirPrefix+RunID()+"-")
	})
)

// BuildBinary builds pkg (relative to the module root, e.g.
// "./internal/demoapp") as a static linux binary and returns its path. Each
// package is built once per process: every test that asks shares the file.
// The directory outlives the test, since later tests reuse it; SweepStale
// removes those over an hour old.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	return BuildBinaryTags(t, pkg)
}

// BuildBinaryTags is BuildBinary with build tags (a test build's own, as
// rollagent_testclock).
func BuildBinaryTags(t testing.TB, pkg string, tags ...string) string {
	t.Helper()
	v, _ := binaries.LoadOrStore(pkg+" "+strings.Join(tags, ","), &builtBinary{})
	b := v.(*builtBinary)
	b.once.Do(func() {
		start := time.Now()
		b.path, b.err = buildBinary(pkg, tags)
		if b.err == nil {
			t.Logf("built %s in %s", pkg, time.Since(start).Round(time.Millisecond))
		}
	})
	if b.err != nil {
		t.Fatalf("building %s: %v", pkg, b.err)
	}
	return b.path
}

func buildBinary(pkg string, tags []string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	// One subdir per package: two packages may share a last element.
	sub, err := os.MkdirTemp(dir, "bin-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(sub, path.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// `go test` puts its own GOROOT/bin first on PATH, so this is the same
	// toolchain. GOOS=linux because the daemon runs linux containers even
	// when the client is a Mac.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-tags="+strings.Join(tags, ","), "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %w\n%s", pkg, root, err, strings.TrimSpace(string(msg)))
	}
	return out, nil
}

// moduleRoot walks up from the working directory, which `go test` sets to
// the package under test, to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in the working directory or above it")
		}
		dir = parent
	}
}
