package lockstep

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// childEnv carries a gate to a re-executed test binary that acquires a slot
// and then hangs while holding it, so that a test can SIGKILL a real holder.
const childEnv = "LOCKSTEP_TEST_CHILD"

type childSpec struct {
	Addr string
	Gate Gate
}

func runChild() int {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := api.DefaultConfig()
	cfg.Address = spec.Addr
	c, err := api.NewClient(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := NewSession(ctx, c, SessionOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	m, _ := New(c, s, Options{Prefix: testPrefix, Name: "child"})
	h, err := m.Acquire(ctx, spec.Gate)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ACQUIRED")
	// Each line on stdin asks for a fence that writes a marker key; the
	// answer says whether the fence let the write through.
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		mark := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "rollagent/g/marker/" + lines.Text(), Value: []byte("x")}}
		if _, err := h.Fence(ctx, mark); err != nil {
			fmt.Println("FENCE error:", err)
		} else {
			fmt.Println("FENCE ok")
		}
	}
	<-ctx.Done() // hold until killed; bounded all the same
	return 0
}

// child is a holder in another process.
type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// fence asks the child to fence a write of marker and returns its answer.
func (c *child) fence(t *testing.T, marker string) string {
	t.Helper()
	fmt.Fprintln(c.in, marker)
	select {
	case l := <-c.lines:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("child did not answer within 30s")
		return ""
	}
}

// launchHolder runs the test binary as a child that acquires g and then
// holds, and returns it once it does; tests and benchmarks share it.
func launchHolder(addr string, g Gate) (*child, error) {
	spec, _ := json.Marshal(childSpec{Addr: addr, Gate: g})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, in: in, lines: make(chan string, 8)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	select {
	case l := <-c.lines:
		if strings.TrimSpace(l) == "ACQUIRED" {
			return c, nil
		}
		err = fmt.Errorf("child said %q", l)
	case <-time.After(30 * time.Second):
		err = errors.New("child did not acquire within 30s")
	}
	c.kill()
	return nil, err
}

func (c *child) kill() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() }

// startHolder is launchHolder for a test: it fails the test on error and
// kills the child when the test ends.
func startHolder(t *testing.T, addr string, g Gate) *child {
	t.Helper()
	c, err := launchHolder(addr, g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.kill)
	return c
}
