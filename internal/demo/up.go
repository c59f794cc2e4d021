package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
)

func up(ctx context.Context, consulBin, bin string) error {
	_ = down(ctx) // a demo left over from an earlier run
	if err := os.MkdirAll(stateDir(), 0o700); err != nil {
		return err
	}
	st := &state{Agents: map[string]int{}}
	c, err := startConsul(consulBin, st)
	if err != nil {
		return err
	}
	images, runtime, err := prepareWorkloads(ctx)
	if err != nil {
		return err
	}
	st.Runtime = runtime
	for i := 1; i <= fleetSize; i++ {
		if err := startAgent(bin, fmt.Sprintf("node-%d", i), st); err != nil {
			return err
		}
	}
	if err := saveState(st); err != nil {
		return err
	}
	store := coordinator.NewStore(c, "")
	if err := rollout(ctx, bin, st, store, images, false); err != nil {
		return err
	}
	if err := rollout(ctx, bin, st, store, images, true); err != nil {
		return err
	}
	printNext(st)
	return saveState(st)
}

func freePort(preferred int) int {
	for p := preferred; p < preferred+50; p++ {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			l.Close()
			return p
		}
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// detached starts a process in its own session, so that it outlives make.
func detached(name string, logName string, args ...string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(stateDir(), logName))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); logf.Close() }()
	return cmd, nil
}

func startConsul(bin string, st *state) (*api.Client, error) {
	port := freePort(8500)
	st.HTTPAddr = "127.0.0.1:" + strconv.Itoa(port)
	cmd, err := detached(bin, "consul.log", "agent", "-dev", "-ui", "-node=demo", "-bind=127.0.0.1",
		"-client=127.0.0.1", "-http-port="+strconv.Itoa(port), "-dns-port=-1", "-grpc-port=-1",
		"-serf-lan-port="+strconv.Itoa(freePort(18301)), "-serf-wan-port="+strconv.Itoa(freePort(18401)),
		"-server-port="+strconv.Itoa(freePort(18300)))
	if err != nil {
		return nil, err
	}
	st.ConsulPID = cmd.Process.Pid
	cfg := api.DefaultConfig()
	cfg.Address = st.HTTPAddr
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	for i := 0; i < 150; i++ {
		if leader, err := c.Status().Leader(); err == nil && leader != "" {
			say("consul %s is up, UI at http://%s/ui/", bin, st.HTTPAddr)
			return c, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, fmt.Errorf("consul did not elect a leader in 30s; see %s", filepath.Join(stateDir(), "consul.log"))
}

func startAgent(bin, node string, st *state) error {
	args := []string{"--consul-addr=" + st.HTTPAddr, "run", "--group=" + group, "--node=" + node}
	if st.Runtime == "exec" {
		dir := filepath.Join(stateDir(), node)
		args = append(args, "--runtime=exec", "--state-dir="+dir,
			"--replace-cmd=sh", "--replace-cmd=-c", "--replace-cmd=cp \"$ROLLAGENT_SPEC\" \""+dir+"/installed.json\"",
			"--health-cmd=test", "--health-cmd=-f", "--health-cmd="+dir+"/installed.json")
	} else {
		args = append(args, "--label="+demoLabel+"=1")
	}
	cmd, err := detached(bin, node+".log", args...)
	if err != nil {
		return err
	}
	st.Agents[node] = cmd.Process.Pid
	return nil
}

// holder returns the node holding the demo group's slot, or "".
func holder(ctx context.Context, store *coordinator.Store) string {
	gs, err := store.Read(ctx, group, nil)
	if err != nil {
		return ""
	}
	return holderOf(gs)
}

// holderOf returns the node holding the slot in gs, or "".
func holderOf(gs *coordinator.GroupState) string {
	for _, e := range gs.Holders.Holding {
		return e.Name
	}
	return ""
}
