package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for demoapp, so TestSIGTERM can send
// a real signal to a real process without a separate go build.
func TestMain(m *testing.M) {
	if os.Getenv("DEMOAPP_TEST_BECOME_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

func TestVersion(t *testing.T) {
	tests := []struct{ name, env, want string }{
		{"linked-in version", "", version},
		{"env overrides", "v2.3.4", "v2.3.4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DEMOAPP_VERSION", tt.env)
			for _, arg := range []string{"--version", "version"} {
				var stdout bytes.Buffer
				if code := run([]string{arg}, &stdout, io.Discard); code != 0 {
					t.Fatalf("%s: exit %d", arg, code)
				}
				if got := strings.TrimSpace(stdout.String()); got != tt.want {
					t.Errorf("%s printed %q, want %q", arg, got, tt.want)
				}
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"frobnicate"}, io.Discard, &stderr); code != 2 {
		t.Errorf("exit = %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "usage:") {
		t.Errorf("stderr = %q, want usage", stderr.String())
	}
}

var listenRE = regexp.MustCompile(`listening on \S*:(\d+)`)

// TestSIGTERM runs demoapp as a child process with no args (so "serve" is the
// default), waits until it answers, then checks SIGTERM ends it with exit 0
// within a second.
func TestSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	// Under -race the child would otherwise sleep 1s at exit (the race
	// runtime's atexit_sleep_ms), which is no fault of demoapp's.
	cmd.Env = append(os.Environ(), "DEMOAPP_TEST_BECOME_MAIN=1", "PORT=0", "DEMOAPP_VERSION=vSIG", "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	var port string
	for port == "" && lines.Scan() {
		if m := listenRE.FindStringSubmatch(lines.Text()); m != nil {
			port = m[1]
		}
	}
	if port == "" {
		t.Fatalf("demoapp never said where it listens (%v)", lines.Err())
	}
	go io.Copy(io.Discard, stderr) // keep the pipe drained until exit

	resp, err := http.Get("http://127.0.0.1:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "vSIG") {
		t.Errorf("GET / = %q, want the version", body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(15 * time.Second): // a hang guard, not a speed target
		_ = cmd.Process.Kill()
		t.Fatal("demoapp did not exit after SIGTERM")
	}
}
