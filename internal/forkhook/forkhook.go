// Package forkhook is a workload for the exec runtime whose replace hook
// installs in a child process, as a shell running a script or a package
// manager does: the hook re-executes itself and waits for the child, which
// takes a drawn time, then writes the installed-version file and restarts
// the workload. The nemesis runs it on exec nodes (issue 25, item 5: no
// hook child outlives its step).
//
// One host is one container, FROM scratch: its first process is
// `forkhook init`, a host's init and service manager in one. It starts the
// agent, starts the workload (`forkhook serve`) whenever a version is
// installed, restarts it when it exits (after a second when it crashed),
// and reaps the orphans a killed agent's hooks leave. The health hook and
// the tests judge the workload with the same Check.
package forkhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Paths on the host (the container's root).
const (
	Dir           = "/host"
	InstalledFile = "/host/installed"
	SocketFile    = "/host/workload.sock"
	PidFile       = "/host/workload.pid"
	StateDir      = "/host/state"
)

// Keys of the spec's container.env that drive the hook.
const (
	// EnvInstall is the range "lo-hi" in milliseconds of the install
	// child's work, drawn per node and SHA (Delay).
	EnvInstall = "FORKHOOK_INSTALL"
	// EnvFail makes the install child fail at the end of its work.
	EnvFail = "FORKHOOK_FAIL"
	// EnvUnhealthy makes the installed workload answer unhealthy.
	EnvUnhealthy = "FORKHOOK_UNHEALTHY"
)

// DefaultInstall is the install child's range when the spec names none.
const DefaultInstall = "500-3000"

// ErrNotInstalled is a host where no install has landed.
var ErrNotInstalled = errors.New("nothing installed")

// Installed is the installed-version file, written by an install child
// once its work is done.
type Installed struct {
	SHA string `json:"sha"`
	// Started is when the replace hook whose child installed it started:
	// after its fence, so a hook started under a CANCEL shows here.
	Started time.Time `json:"started"`
	// Landed is when the install child wrote this file: the nemesis
	// judges whether the node was in a step then, which a sample taken
	// later cannot tell (its Docker and Consul reads are not one instant).
	Landed    time.Time `json:"landed"`
	Unhealthy bool      `json:"unhealthy,omitempty"`
}

// Answer is what the workload says on its socket.
type Answer struct {
	SHA     string `json:"sha"`
	Healthy bool   `json:"healthy"`
}

// ReadInstalled reads the installed-version file under root ("/" on the
// host, /proc/<pid>/root from outside).
func ReadInstalled(root string) (Installed, error) {
	var in Installed
	b, err := os.ReadFile(filepath.Join(root, InstalledFile))
	if errors.Is(err, os.ErrNotExist) {
		return in, ErrNotInstalled
	}
	if err != nil {
		return in, err
	}
	return DecodeInstalled(b)
}

// DecodeInstalled reads the installed-version file's content.
func DecodeInstalled(b []byte) (Installed, error) {
	var in Installed
	if err := json.Unmarshal(b, &in); err != nil {
		return in, fmt.Errorf("%s: %w", InstalledFile, err)
	}
	return in, nil
}

// WriteInstalled writes the installed-version file atomically.
func WriteInstalled(in Installed) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	tmp := InstalledFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, InstalledFile)
}

// Check is the health hook: healthy when a version is installed (want, if
// not empty), the workload answers on its socket within timeout (a frozen
// one does not), runs the installed version and says it is healthy.
func Check(root, want string, timeout time.Duration) (Installed, error) {
	in, err := ReadInstalled(root)
	if err != nil {
		return in, err
	}
	if want != "" && in.SHA != want {
		return in, fmt.Errorf("installed %.12s, want %.12s", in.SHA, want)
	}
	conn, err := net.DialTimeout("unix", filepath.Join(root, SocketFile), timeout)
	if err != nil {
		return in, fmt.Errorf("workload not running: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var a Answer
	if err := json.NewDecoder(conn).Decode(&a); err != nil {
		return in, fmt.Errorf("workload does not answer: %w", err)
	}
	switch {
	case a.SHA != in.SHA:
		return in, fmt.Errorf("workload runs %.12s, installed %.12s", a.SHA, in.SHA)
	case !a.Healthy:
		return in, fmt.Errorf("workload %.12s unhealthy", a.SHA)
	}
	return in, nil
}

// ParseRange reads EnvInstall's "lo-hi" (milliseconds).
func ParseRange(s string) (lo, hi time.Duration, err error) {
	a, b, ok := strings.Cut(s, "-")
	l, err1 := strconv.Atoi(a)
	h, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || l < 0 || h < l {
		return 0, 0, fmt.Errorf("%s=%q: want lo-hi in milliseconds, lo <= hi", EnvInstall, s)
	}
	return time.Duration(l) * time.Millisecond, time.Duration(h) * time.Millisecond, nil
}

// Delay draws the install child's work time in [lo, hi] from sha and
// node: each node of a commit takes its own, and a commit replays the
// same draws, which the test can compute ahead.
func Delay(lo, hi time.Duration, sha, node string) time.Duration {
	if hi <= lo {
		return lo
	}
	h := fnv.New64a()
	h.Write([]byte(sha + "/" + node))
	return lo + time.Duration(h.Sum64()%uint64(hi-lo+1))
}
