package lockbench

import (
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

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/consultest"
)

// apiSemHandoff runs n in-process api.Semaphore contenders with limit 1,
// each with the session api.Semaphore makes for itself.
func apiSemHandoff(b *testing.B, srv *consultest.Server, n int) *result {
	c, ctr, closeIdle := countedClient(b, srv.HTTPAddr)
	defer closeIdle()
	return run(b, c, ctr, "api.Semaphore", "apisem", n, HoldTime, func(ctx context.Context, run string) ([]Hold, []error, time.Duration) {
		prefix := Key(run, "slot")
		return contend(ctx, n, func(ctx context.Context, _ int) (Hold, error) {
			return apiSemTurn(ctx, c, prefix)
		})
	})
}

// apiSemTurn acquires once, holds HoldTime and releases. Once ctx ends, a
// waiter gives up at its next wake (api.Semaphore has no context; its
// blocking queries wait up to 15s).
func apiSemTurn(ctx context.Context, c *api.Client, prefix string) (Hold, error) {
	var hd Hold
	sem, err := c.SemaphorePrefix(prefix, 1)
	if err != nil {
		return hd, err
	}
	lost, err := sem.Acquire(ctx.Done())
	if err != nil {
		return hd, err
	}
	if lost == nil {
		return hd, ctx.Err()
	}
	hd.Acq = time.Now()
	hd.Start = hd.Acq
	time.Sleep(HoldTime)
	hd.End = time.Now()
	return hd, sem.Release()
}

// cliCmd is `consul lock -n=1` at prefix running child. It gets its own
// process group so that a kill takes its child along.
func cliCmd(ctx context.Context, addr, prefix, sessName string, child ...string) *exec.Cmd {
	bin, _ := consultest.Binary()
	args := append([]string{"lock", "-http-addr=" + addr, "-n=1", "-shell=false", "-name=" + sessName, prefix}, child...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// stampScript appends "start <unixnano>", waits, and appends "end
// <unixnano>" to file. An empty wait leaves the end out.
func stampScript(file, wait string) string {
	q := "'" + file + "'"
	s := "echo start $(date +%s%N) >> " + q
	if wait != "" {
		s += "; sleep " + wait + "; echo end $(date +%s%N) >> " + q
	}
	return s
}

// readStamps reads the start and end times a stampScript wrote.
func readStamps(file string) (start, end time.Time, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return start, end, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		ns, perr := strconv.ParseInt(f[1], 10, 64)
		if perr != nil {
			return start, end, fmt.Errorf("%s: %q: %w", file, line, perr)
		}
		switch f[0] {
		case "start":
			start = time.Unix(0, ns)
		case "end":
			end = time.Unix(0, ns)
		}
	}
	return start, end, nil
}

// cliHandoff runs n `consul lock -n=1` processes at once, each holding for
// `sleep 0.2`. Requests come from the agent's own metrics.
func cliHandoff(b *testing.B, srv *consultest.Server, n int) *result {
	dir := b.TempDir()
	scrape := startMetricsScrape(srv.Client())
	defer scrape.stop()
	runStart := time.Now()
	r := run(b, srv.Client(), nil, "consul lock -n 1", "cli", n, cliHoldTime, func(ctx context.Context, run string) ([]Hold, []error, time.Duration) {
		prefix := Key(run, "slot")
		return contend(ctx, n, func(ctx context.Context, i int) (Hold, error) {
			file := filepath.Join(dir, run+"-"+name(i))
			cmd := cliCmd(ctx, srv.HTTPAddr, prefix, "bench-"+name(i), "sh", "-c", stampScript(file, "0.2"))
			if out, err := cmd.CombinedOutput(); err != nil {
				return Hold{}, fmt.Errorf("consul lock: %w: %s", err, out)
			}
			start, end, err := readStamps(file)
			return Hold{Acq: start, Start: start, End: end}, err
		})
	})
	r.reqs, r.reqNote = scrape.window(runStart, time.Now())
	return r
}
