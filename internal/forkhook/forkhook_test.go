package forkhook

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in     string
		lo, hi time.Duration
		bad    bool
	}{
		{in: "500-3000", lo: 500 * time.Millisecond, hi: 3 * time.Second},
		{in: "0-0"},
		{in: "3000-500", bad: true},
		{in: "5", bad: true},
		{in: "-1-2", bad: true},
		{in: "a-b", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			lo, hi, err := ParseRange(tc.in)
			if (err != nil) != tc.bad || lo != tc.lo || hi != tc.hi {
				t.Errorf("ParseRange(%q) = %s, %s, %v", tc.in, lo, hi, err)
			}
		})
	}
}

func TestDelayInRangeAndReplayed(t *testing.T) {
	lo, hi := time.Second, 2*time.Second
	seen := map[time.Duration]bool{}
	for _, node := range []string{"h1", "h2", "h3", "h4"} {
		d := Delay(lo, hi, "sha", node)
		if d < lo || d > hi || d != Delay(lo, hi, "sha", node) {
			t.Errorf("Delay for %s = %s: want one value in [%s, %s]", node, d, lo, hi)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		t.Errorf("every node drew the same delay: %v", seen)
	}
}

// serveAnswer answers every connection on root's socket with a.
func serveAnswer(t *testing.T, root string, a Answer) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(root, SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for i := 0; i < 100; i++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = json.NewEncoder(c).Encode(a)
			c.Close()
		}
	}()
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		installed string // "" writes no file
		answer    *Answer
		want      string
		err       string
	}{
		{name: "nothing installed", err: ErrNotInstalled.Error()},
		{name: "not running", installed: "v1", err: "not running"},
		{name: "healthy", installed: "v1", answer: &Answer{SHA: "v1", Healthy: true}},
		{name: "old version runs", installed: "v2", answer: &Answer{SHA: "v1", Healthy: true}, err: "runs v1, installed v2"},
		{name: "unhealthy", installed: "v1", answer: &Answer{SHA: "v1"}, err: "unhealthy"},
		{name: "another version wanted", installed: "v1", answer: &Answer{SHA: "v1", Healthy: true}, want: "v2", err: "want v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, err := os.MkdirTemp("", "fh") // short: a socket path has at most 107 bytes
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(root) })
			if err := os.MkdirAll(filepath.Join(root, Dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.installed != "" {
				b, _ := json.Marshal(Installed{SHA: tc.installed})
				if err := os.WriteFile(filepath.Join(root, InstalledFile), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.answer != nil {
				serveAnswer(t, root, *tc.answer)
			}
			_, err = Check(root, tc.want, time.Second)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Check = %v, want error %q", err, tc.err)
			}
		})
	}
}

// A workload that accepts and never answers (frozen) is not healthy.
func TestCheckFrozenWorkload(t *testing.T) {
	root, err := os.MkdirTemp("", "fh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	_ = os.MkdirAll(filepath.Join(root, Dir), 0o755)
	b, _ := json.Marshal(Installed{SHA: "v1"})
	_ = os.WriteFile(filepath.Join(root, InstalledFile), b, 0o644)
	l, err := net.Listen("unix", filepath.Join(root, SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // the kernel accepts into the backlog; nobody answers
	_, err = Check(root, "", 100*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("Check of a frozen workload = %v, want a timeout", err)
	}
}
