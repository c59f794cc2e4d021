package lockstep

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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
	if _, err := m.Acquire(ctx, spec.Gate); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ACQUIRED")
	<-ctx.Done() // hold until killed; bounded all the same
	return 0
}

// startHolder runs a child that holds the slot, and returns it once it does.
func startHolder(t *testing.T, addr string, g Gate) *exec.Cmd {
	t.Helper()
	spec, _ := json.Marshal(childSpec{Addr: addr, Gate: g})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if strings.TrimSpace(l) != "ACQUIRED" {
			t.Fatalf("child said %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child did not acquire within 30s")
	}
	return cmd
}
