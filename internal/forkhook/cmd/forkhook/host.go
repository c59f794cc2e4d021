package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/rollagent/rollagent/internal/forkhook"
)

const (
	// crashRestart is how long init waits to restart a workload that
	// died by a signal or failed: a crash loop keeps it mostly down, as
	// a service manager's restart delay does.
	crashRestart = time.Second
	initTick     = 200 * time.Millisecond
)

// host is init's view of its two services.
type host struct {
	agentArgv []string
	agent     int // pid, 0 when not running
	// again is a start asked for while the agent was still stopping (a
	// SIGTERM mid-step lets it finish or undo first): it starts once it
	// has exited, as a service manager's start queued behind a stop.
	again     bool
	work      int
	restartAt time.Time
	stderr    io.Writer
}

// initHost is the host's first process: it starts the agent at boot and
// again on SIGUSR1 (the tests' "start the agent"; once it has exited, if it
// is still stopping), keeps the installed
// workload running, and reaps every orphan; SIGTERM shuts the host down.
func initHost(agentArgv []string, stderr io.Writer) int {
	if err := os.MkdirAll(forkhook.StateDir, 0o755); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGUSR1, syscall.SIGTERM)
	h := &host{agentArgv: agentArgv, stderr: stderr}
	h.startAgent()
	tick := time.NewTicker(initTick)
	defer tick.Stop()
	for {
		select {
		case s := <-sigs:
			switch s {
			case syscall.SIGUSR1:
				h.startAgent()
			case syscall.SIGTERM:
				return 0
			}
		case <-tick.C:
		}
		h.reap()
		h.keepWorkload()
	}
}

func (h *host) start(argv []string) int {
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{Env: os.Environ(), Files: []*os.File{nil, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Fprintf(h.stderr, "forkhook init: start %s: %v\n", argv[0], err)
		return 0
	}
	pid := p.Pid
	_ = p.Release() // reaped by reap, as every orphan is
	return pid
}

func (h *host) startAgent() {
	if h.agent != 0 {
		h.again = true
		return
	}
	h.agent, h.again = h.start(h.agentArgv), false
}

// reap collects every exited child: the agent, the workload, and the
// hooks a killed agent left behind.
func (h *host) reap() {
	for i := 0; i < 1000; i++ { // bounded: there are not that many processes
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		switch pid {
		case h.agent:
			h.agent = 0
			if h.again {
				h.startAgent()
			}
		case h.work:
			h.work = 0
			_ = os.Remove(forkhook.PidFile)
			if ws.Exited() && ws.ExitStatus() == 0 {
				h.restartAt = time.Now() // stopped for a new install
			} else {
				h.restartAt = time.Now().Add(crashRestart)
			}
		}
	}
}

// keepWorkload starts the installed workload if it does not run.
func (h *host) keepWorkload() {
	if h.work != 0 || time.Now().Before(h.restartAt) {
		return
	}
	if _, err := forkhook.ReadInstalled("/"); err != nil {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	if h.work = h.start([]string{self, "serve"}); h.work != 0 {
		_ = os.WriteFile(forkhook.PidFile, []byte(strconv.Itoa(h.work)), 0o644)
	}
}

// serve is the workload: it answers its version and health on a socket
// until SIGTERM, on which it exits 0.
func serve(stderr io.Writer) int {
	in, err := forkhook.ReadInstalled("/")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	_ = os.Remove(forkhook.SocketFile)
	l, err := net.Listen("unix", forkhook.SocketFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		_ = l.Close()
	}()
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return 0
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		_ = json.NewEncoder(c).Encode(forkhook.Answer{SHA: in.SHA, Healthy: !in.Unhealthy})
		_ = c.Close()
	}
}
