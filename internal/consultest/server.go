package consultest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// StartTimeout bounds how long a start waits for a leader and a healthy node.
const StartTimeout = 60 * time.Second

// Options shape one agent. The zero value is a -dev agent.
type Options struct {
	// Persistent makes a server with a data dir that survives Restart,
	// instead of a -dev agent that forgets everything.
	Persistent bool
	// BootstrapExpect is the cluster size for a persistent server.
	// Optional, defaults to 1.
	BootstrapExpect int
	// Join lists serf LAN addresses to join.
	Join []string
	// HCL is extra agent configuration, for example an acl block.
	HCL string
	// Token is the ACL token the returned client uses.
	Token string
	// Client makes a client agent, neither -dev nor -server, with a data
	// dir that survives Restart; Join must name a server. Killing one is
	// how a test kills a node: its serfHealth, and every session bound to
	// it, fails.
	Client bool
}

// Server is one consul agent process on loopback.
type Server struct {
	t        testing.TB
	bin      string
	opts     Options
	Name     string
	HTTPAddr string
	SerfAddr string
	dataDir  string
	logPath  string
	ports    [4]int // http, serf lan, serf wan, server rpc
	cmd      *exec.Cmd
	exited   chan struct{}

	clientMu   sync.Mutex
	client     *api.Client // Client's, kept: see Client
	clientAddr string      // the HTTPAddr client talks to
}

// NewDev starts a -dev agent and stops it when the test ends.
func NewDev(t testing.TB) *Server {
	t.Helper()
	return New(t, Options{})
}

// New starts an agent with opts and stops it when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := prepare(t, opts)
	if err := s.Start(); err != nil {
		t.Fatalf("consultest: %v", err)
	}
	waitUp(t, []*Server{s})
	return s
}

// errExited means consul exited while starting.
var errExited = errors.New("consul exited while starting")

func prepare(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := RequireBinary(t)
	dir := t.TempDir()
	s := &Server{t: t, bin: bin, opts: opts, dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "consul.log")}
	s.pickPorts(t)
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			s.dumpLog()
		}
	})
	return s
}

// pickPorts chooses four distinct free ports: the listeners stay open until
// all four are chosen, so the kernel cannot hand out one twice.
func (s *Server) pickPorts(t testing.TB) {
	t.Helper()
	var ls []net.Listener
	for i := range s.ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("consultest: free port: %v", err)
		}
		ls = append(ls, l)
		s.ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	s.Name = "node-" + strconv.Itoa(s.ports[1])
	s.HTTPAddr = "127.0.0.1:" + strconv.Itoa(s.ports[0])
	s.SerfAddr = "127.0.0.1:" + strconv.Itoa(s.ports[1])
}

func (s *Server) args() []string {
	a := []string{"agent", "-node=" + s.Name, "-bind=127.0.0.1", "-client=127.0.0.1",
		"-http-port=" + strconv.Itoa(s.ports[0]), "-serf-lan-port=" + strconv.Itoa(s.ports[1]),
		"-serf-wan-port=" + strconv.Itoa(s.ports[2]), "-server-port=" + strconv.Itoa(s.ports[3]),
		"-dns-port=-1", "-grpc-port=-1", "-log-level=debug", "-disable-host-node-id",
		// -dev does not check for updates, but a server or client would
		// call out to the internet: tests talk to loopback only.
		"-hcl=disable_update_check = true"}
	switch {
	case s.opts.Client:
		a = append(a, "-data-dir="+s.dataDir)
	case !s.opts.Persistent:
		a = append(a, "-dev")
	default:
		n := s.opts.BootstrapExpect
		if n == 0 {
			n = 1
		}
		a = append(a, "-server", "-data-dir="+s.dataDir, "-bootstrap-expect="+strconv.Itoa(n),
			"-hcl=performance { raft_multiplier = 1 }")
	}
	for _, j := range s.opts.Join {
		a = append(a, "-retry-join="+j)
	}
	if s.opts.HCL != "" {
		a = append(a, "-hcl="+s.opts.HCL)
	}
	return a
}

// Start launches the process; it does not wait for readiness.
func (s *Server) Start() error {
	if s.cmd != nil {
		return errors.New("consultest: already running")
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: a crashed test binary must not leave agents behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) {
		_ = c.Wait()
		logf.Close()
		close(done)
	}(cmd, s.exited)
	return nil
}

// Stop ends the agent gracefully, then kills it after a bound.
func (s *Server) Stop() { s.signal(syscall.SIGINT) }

// Kill ends the agent at once, like a crash.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
}

// Restart stops and starts the agent on the same ports and data dir.
func (s *Server) Restart() error {
	s.Stop()
	if err := s.Start(); err != nil {
		return err
	}
	return s.WaitReady(StartTimeout)
}

// PID is the agent's process ID, 0 when it is not running.
func (s *Server) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Client returns the api client of this agent, the same one on every call.
// A test polls through it, often for a minute: a client per call would
// leave each one's keep-alive connection open, and Consul refuses a client
// address past 200 of them (limits.http_max_conns_per_client) with a 429.
func (s *Server) Client() *api.Client {
	s.t.Helper()
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	if s.client == nil || s.clientAddr != s.HTTPAddr {
		s.client, s.clientAddr = s.ClientVia(nil), s.HTTPAddr
	}
	return s.client
}

// ClientVia returns an api client for this agent whose requests go through
// rt, which a test puts there to count or alter them: a new client on
// each call (nil: with a transport of its own).
func (s *Server) ClientVia(rt http.RoundTripper) *api.Client {
	s.t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = s.HTTPAddr
	cfg.Scheme = "http"
	cfg.Token = s.opts.Token
	if rt != nil {
		cfg.HttpClient = &http.Client{Transport: rt}
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		s.t.Fatalf("consultest: client: %v", err)
	}
	return c
}

// WaitReady waits until there is a leader and this node's serfHealth passes,
// which is what a session bound to serfHealth needs.
func (s *Server) WaitReady(timeout time.Duration) error {
	return s.await(timeout, "ready", s.ready)
}

// waitAnswering waits until this agent answers HTTP, leader or not: consul
// opens its HTTP port after every other, so it has bound them all.
func (s *Server) waitAnswering(timeout time.Duration) error {
	return s.await(timeout, "answering", func(ctx context.Context, c *api.Client) error {
		_, err := c.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
		var status api.StatusError
		if errors.As(err, &status) {
			return nil
		}
		return err
	})
}

// await tries until try succeeds, the agent exits (errExited), or timeout.
func (s *Server) await(timeout time.Duration, what string, try func(context.Context, *api.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := s.Client()
	var last error
	for ctx.Err() == nil {
		last = try(ctx, c)
		if last == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%w; log: %s", errExited, s.tail(20))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("consul at %s not %s after %s: %v", s.HTTPAddr, what, timeout, last)
}

func (s *Server) ready(ctx context.Context, c *api.Client) error {
	leader, err := c.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	checks, _, err := c.Health().Node(s.Name, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return err
	}
	for _, ch := range checks {
		if ch.CheckID == "serfHealth" && ch.Status == api.HealthPassing {
			return nil
		}
	}
	return errors.New("serfHealth not passing yet")
}

func (s *Server) tail(n int) string {
	b, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (s *Server) dumpLog() { s.t.Logf("consul %s log tail:\n%s", s.Name, s.tail(40)) }
