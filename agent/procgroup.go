package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// hookKillWait bounds the wait, once a hook's process group was sent
// SIGKILL, for every process of it to be gone. A killed process runs no
// more of its own code; only one stuck in the kernel (a hung NFS mount,
// say) takes longer to go.
const hookKillWait = 10 * time.Second

// killedError is a hook's end by a signal the agent did not send: its
// deadline's kill is no such signal.
type killedError struct {
	sig syscall.Signal
	err error
}

func (e *killedError) Error() string { return e.err.Error() }
func (e *killedError) Unwrap() error { return e.err }

// inOwnGroup makes cmd a process group of its own, killed whole when its
// context ends: killing the hook alone leaves its children running (a
// shell's script, a package manager) past the deadline and the undo. A
// group of its own also keeps a terminal's ^C, sent to the agent's
// foreground group, from cutting the hook off under the agent.
func inOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	// Wait returns even if the leader outlives its SIGKILL; reapGroup
	// then says so.
	cmd.WaitDelay = hookKillWait
}

// killGroup sends SIGKILL to the process group pgid.
func killGroup(pgid int) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// reapGroup kills what is left of the process group pgid and waits, for
// at most hookKillWait, until none of its processes runs. The group's ID
// cannot be reused while any member, zombies included, is left, so a kill
// sent before the group is seen gone reaches only its own processes.
func reapGroup(pgid int) error {
	deadline := time.Now().Add(hookKillWait)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		err := killGroup(pgid)
		if errors.Is(err, os.ErrProcessDone) {
			return nil
		}
		if live, lerr := groupLive(pgid); lerr == nil && len(live) == 0 {
			// Only zombies are left, for their new parent to reap.
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process group %d still runs %s after SIGKILL: %v", pgid, hookKillWait, err)
		}
		time.Sleep(pause)
	}
}

// groupLive lists the processes of group pgid that are not zombies, from
// /proc: a hook's orphaned children are reaped by init, which may take its
// time (or never, when init does not reap), and a zombie runs nothing.
func groupLive(pgid int) ([]int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var live []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		if state, pg, ok := parseStat(b); ok && pg == pgid && state != 'Z' && state != 'X' {
			live = append(live, pid)
		}
	}
	return live, nil
}

// groupHasEnv says a live process of group pgid has every entry of env in
// its environment, which a hook's children inherit.
func groupHasEnv(pgid int, env [][]byte) bool {
	live, _ := groupLive(pgid)
	for _, pid := range live {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil {
			continue
		}
		if hasAll(bytes.Split(b, []byte{0}), env) {
			return true
		}
	}
	return false
}

// hasAll says vars holds every entry of want.
func hasAll(vars, want [][]byte) bool {
	for _, w := range want {
		if !slices.ContainsFunc(vars, func(v []byte) bool { return bytes.Equal(v, w) }) {
			return false
		}
	}
	return true
}

// parseStat reads the state and process group of a /proc/<pid>/stat line:
// "pid (comm) state ppid pgrp ...", where comm may hold any byte.
func parseStat(b []byte) (state byte, pgid int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pgid, err := strconv.Atoi(string(f[2]))
	return f[0][0], pgid, err == nil
}
