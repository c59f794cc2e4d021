// Command forkhook is the exec-runtime workload of the nemesis' hooks
// group (see package forkhook):
//
//	forkhook init -- AGENT ARGS...   the host's first process
//	forkhook replace                 the replace hook: installs in a child
//	forkhook health                  the health hook
//	forkhook serve                   the workload (init starts it)
//	forkhook install                 the replace hook's child
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/rollagent/rollagent/internal/forkhook"
)

// healthTimeout bounds the health hook's wait for the workload's answer.
const healthTimeout = 2 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: forkhook init|replace|health|serve|install")
		return 2
	}
	switch args[0] {
	case "init":
		if len(args) < 3 || args[1] != "--" {
			fmt.Fprintln(stderr, "usage: forkhook init -- AGENT ARGS...")
			return 2
		}
		return initHost(args[2:], stderr)
	case "replace":
		return replace(stderr)
	case "install":
		return install(stderr)
	case "health":
		if _, err := forkhook.Check("/", os.Getenv("ROLLAGENT_SHA"), healthTimeout); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	case "serve":
		return serve(stderr)
	}
	fmt.Fprintf(stderr, "forkhook: unknown command %q\n", args[0])
	return 2
}

// specEnv reads the container.env of the spec the agent gave the hook.
func specEnv() (map[string]string, error) {
	b, err := os.ReadFile(os.Getenv("ROLLAGENT_SPEC"))
	if err != nil {
		return nil, err
	}
	var s struct {
		Container struct {
			Env map[string]string `json:"env"`
		} `json:"container"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("ROLLAGENT_SPEC: %w", err)
	}
	return s.Container.Env, nil
}

// replace runs the install in a child and waits for it, as a shell runs
// a script: a kill of this process alone leaves the child installing.
func replace(stderr io.Writer) int {
	started := time.Now()
	env, err := specEnv()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	r := env[forkhook.EnvInstall]
	if r == "" {
		r = forkhook.DefaultInstall
	}
	lo, hi, err := forkhook.ParseRange(r)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	sha := os.Getenv("ROLLAGENT_SHA")
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cmd := exec.Command(self, "install")
	cmd.Env = append(os.Environ(),
		"FORKHOOK_STARTED="+started.Format(time.RFC3339Nano),
		"FORKHOOK_DELAY="+forkhook.Delay(lo, hi, sha, os.Getenv("ROLLAGENT_NODE")).String(),
		"FORKHOOK_DO_FAIL="+env[forkhook.EnvFail], "FORKHOOK_DO_UNHEALTHY="+env[forkhook.EnvUnhealthy])
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(stderr, "install of %.12s: %v\n", sha, err)
		return 1
	}
	return 0
}

// install is the child: it works for its drawn time, then installs and
// has init restart the workload on the new version.
func install(stderr io.Writer) int {
	delay, err1 := time.ParseDuration(os.Getenv("FORKHOOK_DELAY"))
	started, err2 := time.Parse(time.RFC3339Nano, os.Getenv("FORKHOOK_STARTED"))
	if err1 != nil || err2 != nil {
		fmt.Fprintln(stderr, "forkhook install: run by forkhook replace only")
		return 2
	}
	time.Sleep(delay)
	sha := os.Getenv("ROLLAGENT_SHA")
	if os.Getenv("FORKHOOK_DO_FAIL") != "" {
		fmt.Fprintf(stderr, "install of %.12s failed after %s (%s)\n", sha, delay, forkhook.EnvFail)
		return 1
	}
	if err := forkhook.WriteInstalled(forkhook.Installed{SHA: sha, Started: started, Landed: time.Now(),
		Unhealthy: os.Getenv("FORKHOOK_DO_UNHEALTHY") != ""}); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// The running workload exits on SIGTERM, and init starts the one
	// just installed.
	if b, err := os.ReadFile(forkhook.PidFile); err == nil {
		if pid, err := strconv.Atoi(string(b)); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGTERM) // it may have exited meanwhile
		}
	}
	return 0
}
