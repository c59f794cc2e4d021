package dockertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// daemonTimeout bounds a private daemon's start and its graceful stop (which
// stops its containers first, each within its own stop timeout).
const daemonTimeout = 60 * time.Second

// DaemonOptions shape a private daemon. The zero value is a daemon whose
// data root is a temp dir.
type DaemonOptions struct {
	// DataSize, when not zero, puts the data root on a tmpfs of that many
	// bytes, so that a test can fill the daemon's disk without touching
	// the machine's.
	DataSize int64
}

// Daemon is a private dockerd, with its own containerd, data root, exec root
// and socket, that a test may stop and start at will: the machine's own
// daemon is shared with CI and other tests and must never be restarted.
//
// It runs in a network namespace of its own. That is not optional: with
// --bridge=none, which a daemon that must not touch iptables or the host's
// networks needs, dockerd deletes any interface named docker0 it can see,
// and in the host's namespace that is the main daemon's bridge. Its
// containers therefore have no network: specs must use network_mode "none"
// (loopback still works inside the container, so a health check on
// 127.0.0.1 does too). Storage is vfs, which works on any filesystem,
// nested ones included.
type Daemon struct {
	t        testing.TB
	Host     string // DOCKER_HOST for clients and agents: unix://<socket>
	DataRoot string
	dir      string // exec root, socket, pid file and config: a short path, for unix socket limits
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{}
}

// NewDaemon starts a private daemon and stops it, and removes what it made,
// when the test ends. A daemon that cannot start skips the test, or fails
// it under CI=true, with the reason.
func NewDaemon(t testing.TB, opts DaemonOptions) *Daemon {
	t.Helper()
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		unavailable(t, "dockerd is not installed: "+err.Error())
	}
	d := &Daemon{t: t, DataRoot: t.TempDir()}
	// The socket path must stay well under the 108 bytes of sun_path, which
	// a test's TempDir, named after the test, may not; binDirPrefix lets
	// SweepStale find it if a crash leaves it behind.
	if d.dir, err = os.MkdirTemp("", binDirPrefix+RunID()+"-dockerd-"); err != nil {
		t.Fatal(err)
	}
	d.Host, d.logPath = "unix://"+filepath.Join(d.dir, "docker.sock"), filepath.Join(d.dir, "dockerd.log")
	if err := os.WriteFile(filepath.Join(d.dir, "daemon.json"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the daemon stops, then the tmpfs is
	// unmounted, then the dirs go (TempDir's own cleanup comes last).
	t.Cleanup(func() { _ = os.RemoveAll(d.dir) })
	if opts.DataSize > 0 {
		if err := syscall.Mount("tmpfs", d.DataRoot, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0711", opts.DataSize)); err != nil {
			unavailable(t, fmt.Sprintf("cannot mount a tmpfs for the daemon's data root: %v", err))
		}
		t.Cleanup(func() { d.unmount() })
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("dockertest: %v", err)
		}
		if t.Failed() {
			t.Logf("private dockerd log tail:\n%s", d.tail(30))
		}
	})
	if err := d.start(bin); err != nil {
		unavailable(t, err.Error())
	}
	return d
}

// unavailable skips the test, or fails it under CI=true, where a test must
// never pass because what it needs was missing.
func unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal("dockertest: " + msg + " (CI=true: failing instead of skipping)")
	}
	t.Skip("dockertest: " + msg)
}

// Start starts the daemon again after Stop, on the same data, and waits
// until it answers.
func (d *Daemon) Start() error {
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		return err
	}
	return d.start(bin)
}

func (d *Daemon) start(bin string) error {
	if d.cmd != nil {
		return errors.New("private dockerd: already running")
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "--config-file="+filepath.Join(d.dir, "daemon.json"),
		"--data-root="+d.DataRoot, "--exec-root="+filepath.Join(d.dir, "exec"),
		"--pidfile="+filepath.Join(d.dir, "dockerd.pid"), "--host="+d.Host,
		"--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
		"--storage-driver=vfs", "--log-level=info")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own network namespace (see Daemon); Pdeathsig: a crashed test
	// binary must not leave a daemon behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("cannot start a private dockerd in its own network namespace: %w", err)
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); logf.Close(); close(done) }(d.exited)
	return d.waitReady()
}

func (d *Daemon) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), daemonTimeout)
	defer cancel()
	cli, err := client.NewClientWithOpts(client.WithHost(d.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		_, err := cli.Ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-d.exited:
			d.cmd = nil
			return fmt.Errorf("private dockerd exited while starting; log:\n%s", d.tail(20))
		case <-ctx.Done():
			return fmt.Errorf("private dockerd not answering after %s: %v; log:\n%s", daemonTimeout, err, d.tail(20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops the daemon as its init system would: SIGTERM, which stops its
// containers (those with a restart policy come back when it starts again),
// and SIGKILL to its process group past a bound.
func (d *Daemon) Stop() error {
	if d.cmd == nil {
		return nil
	}
	defer func() { d.cmd = nil }()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return nil
	case <-time.After(daemonTimeout):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.exited
		return fmt.Errorf("private dockerd ignored SIGTERM for %s and was killed", daemonTimeout)
	}
}

// Client returns a client of this daemon, closed when the test ends, its
// API version fixed by a ping, as Connect's is, so that it may be shared.
// The daemon must be running.
func (d *Daemon) Client(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost(d.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), daemonTimeout)
	defer cancel()
	ping, err := cli.Ping(ctx)
	if err != nil {
		t.Fatalf("private dockerd: %v", err)
	}
	cli.NegotiateAPIVersionPing(ping)
	return cli
}

// unmount takes the tmpfs away once the daemon is gone; a lazy unmount
// covers mounts the daemon left under it.
func (d *Daemon) unmount() {
	if err := syscall.Unmount(d.DataRoot, 0); err != nil {
		if err := syscall.Unmount(d.DataRoot, syscall.MNT_DETACH); err != nil {
			d.t.Errorf("dockertest: unmount the private daemon's data root: %v", err)
		}
	}
}

func (d *Daemon) tail(n int) string {
	b, _ := os.ReadFile(d.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
