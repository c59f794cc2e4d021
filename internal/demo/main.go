// Command demo is `make demo`: a local Consul with its UI, a fleet of five
// agents each managing its own container, and a real rollout from v1 to v2
// during which the agent holding the slot is SIGKILLed and restarted.
// `make demo-down` (demo down) removes everything it made. `demo images`
// builds the images of the Compose example.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

const (
	group     = "demo"
	demoLabel = "rollagent.demo"
	fleetSize = 5
)

// state is what `up` leaves behind for `down`.
type state struct {
	ConsulPID int            `json:"consul_pid"`
	Agents    map[string]int `json:"agents"` // node -> pid
	HTTPAddr  string         `json:"http_addr"`
	Runtime   string         `json:"runtime"`
}

func stateDir() string { return filepath.Join(os.TempDir(), "rollagent-demo") }

func main() {
	consul := flag.String("consul", "consul", "consul binary")
	bin := flag.String("rollagent", "bin/rollagent", "rollagent binary")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch flag.Arg(0) {
	case "up":
		err = up(ctx, *consul, *bin)
	case "down":
		err = down(ctx)
	case "images":
		err = images(ctx, *consul, *bin)
	default:
		err = fmt.Errorf("usage: demo [flags] up|down|images")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func saveState(s *state) error {
	b, _ := json.MarshalIndent(s, "", "  ")
	return os.WriteFile(filepath.Join(stateDir(), "state.json"), b, 0o600)
}

func loadState() (*state, error) {
	b, err := os.ReadFile(filepath.Join(stateDir(), "state.json"))
	if err != nil {
		return nil, err
	}
	var s state
	return &s, json.Unmarshal(b, &s)
}

// down stops what up started and removes the demo's containers and images.
func down(ctx context.Context) error {
	if s, err := loadState(); err == nil {
		for node, pid := range s.Agents {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			say("stopped agent %s", node)
		}
		waitGone(s.Agents)
		_ = syscall.Kill(s.ConsulPID, syscall.SIGTERM)
		say("stopped consul")
	}
	if err := removeDocker(ctx); err != nil {
		say("docker cleanup: %v", err)
	}
	return os.RemoveAll(stateDir())
}

func waitGone(pids map[string]int) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		alive := 0
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
