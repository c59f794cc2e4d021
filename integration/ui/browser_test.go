package ui

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rollagent/rollagent/internal/consultest"
)

const (
	// browserBound bounds everything one browser does, start to close.
	browserBound = 5 * time.Minute
	// stepBound bounds one page action.
	stepBound = 60 * time.Second
	// width and height of the viewport, and so of the screenshots: wide
	// enough for an instance's tags to fit on its row.
	width, height = 1440, 800
)

// browser is a headless Chromium driven through its DevTools pipe, so it
// opens no port. It is killed, with every child process, when the test ends.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// chromiumPath finds Debian's chromium, or stops the test: a skip for a
// developer, a failure under CI=true.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		consultest.Unavailable(t, "chromium: not on PATH (apt-get install chromium): %v", err)
	}
	return p
}

// newBrowser starts Chromium with a user data dir of its own.
func newBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(dataDir),
		chromedp.WindowSize(width, height),
		// Chromium as root (a container, CI) refuses to start sandboxed.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("hide-scrollbars", true),
	)
	bound, cancelBound := context.WithTimeout(context.Background(), browserBound)
	actx, cancelAlloc := chromedp.NewExecAllocator(bound, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // kills the browser and waits for it
		cancelBound()
		killLeftovers(t, dataDir)
	})
	// The first action starts the browser, under bctx rather than a step's
	// shorter context: the process lives as long as the context it starts on.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(width, height)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, ctx: bctx}
}

// killLeftovers kills, by pid, any process still running with the browser's
// user data dir (Chromium's zygote and helpers can outlive the main process
// for a moment), and fails the test if one survives.
func killLeftovers(t *testing.T, dataDir string) {
	want := []byte("--user-data-dir=" + dataDir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := processesWith(want)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("chromium processes %v outlived the test", pids)
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesWith lists the processes that have arg on their command line.
func processesWith(arg []byte) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for a := range bytes.SplitSeq(cmdline, []byte{0}) {
			if bytes.Equal(a, arg) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// open navigates to url.
func (b *browser) open(url string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepBound)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("open %s: %v", url, err)
	}
}

// text is the page's visible text.
func (b *browser) text() (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, stepBound)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
}

// waitPage waits, for at most d, until check finds nothing wrong with the
// page's visible text, and returns that text: the Consul UI renders from its
// own API calls after the page has loaded.
func (b *browser) waitPage(d time.Duration, what string, check func(text string) string) string {
	b.t.Helper()
	var text string
	eventually(b.t, d, what, func() string {
		var err error
		if text, err = b.text(); err != nil {
			return err.Error()
		}
		if p := check(text); p != "" {
			return p + "; the page shows:\n" + text
		}
		return ""
	})
	return text
}

// lacks lists what of want text does not contain, or "".
func lacks(text string, want ...string) string {
	var missing []string
	for _, w := range want {
		if !strings.Contains(text, w) {
			missing = append(missing, fmt.Sprintf("%q", w))
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return "no " + strings.Join(missing, ", ")
}

// screenshot saves a full-page PNG into the test's temp dir and, when
// ROLLAGENT_UPDATE_SCREENSHOTS=1, into docs/ as well.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepBound)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG, not JPEG
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{b.t.TempDir()}
	if os.Getenv("ROLLAGENT_UPDATE_SCREENSHOTS") == "1" {
		dirs = append(dirs, filepath.Join("..", "..", "docs")) // go test runs in the package dir
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("screenshot %s (%d KiB)", p, len(png)/1024)
	}
}
