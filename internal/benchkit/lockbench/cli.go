package lockbench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/consultest"
)

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
