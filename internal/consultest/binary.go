package consultest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
)

// Version is the Consul release the Makefile builds; it keys the cache dir.
const Version = "1.13.9"

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// CachedBinary is where `make consul` puts the binary it builds.
func CachedBinary() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "rollagent", "consul-"+Version, "consul"), nil
}

// Binary returns the path of a usable consul binary, or an error that says
// how to get one.
func Binary() (string, error) {
	binOnce.Do(func() { binPath, binErr = findBinary() })
	return binPath, binErr
}

func findBinary() (string, error) {
	if p := os.Getenv("ROLLAGENT_CONSUL"); p != "" {
		if err := checkVersion(p); err != nil {
			return "", fmt.Errorf("ROLLAGENT_CONSUL=%s: %w", p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("consul"); err == nil && checkVersion(p) == nil {
		return p, nil
	}
	cached, err := CachedBinary()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(cached); err != nil {
		return "", fmt.Errorf("no consul binary: none on PATH and none at %s; run `make consul` to build Consul %s", cached, Version)
	}
	return cached, checkVersion(cached)
}

var versionRE = regexp.MustCompile(`Consul v(\d+)\.(\d+)\.`)

// checkVersion accepts 1.13 and newer: the api calls rollagent relies on are
// tested against 1.13.9.
func checkVersion(path string) error {
	out, err := exec.Command(path, "version").Output()
	if err != nil {
		return fmt.Errorf("%s version: %w", path, err)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("%s version: unrecognised output %q", path, out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	if major < 1 || (major == 1 && minor < 13) {
		return fmt.Errorf("%s is Consul %s.%s; need 1.13 or newer", path, m[1], m[2])
	}
	return nil
}

// RequireBinary returns the consul binary, skipping the test when there is
// none, or failing it when CI=true.
func RequireBinary(t testing.TB) string {
	t.Helper()
	p, err := Binary()
	if err != nil {
		Unavailable(t, "consul: %v", err)
	}
	return p
}

// Unavailable stops a test whose real dependency is missing: a skip for a
// developer, a failure in CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true, so this must not skip: "+format, args...)
	}
	t.Skipf("skipped: "+format, args...)
}
