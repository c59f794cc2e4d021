package lockbench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/consultest"
)

// failover is the failover row of one system.
type failover struct {
	system   string
	tries    []time.Duration // sorted; kill -> next holder starts, timeouts excluded
	timeouts int
	errs     []string
	note     string
}

func (f *failover) report(b *testing.B) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(benchkit.Quantile(f.tries, 0.5).Seconds(), "failover-p50-s")
	if len(f.tries) > 0 {
		b.ReportMetric(f.tries[len(f.tries)-1].Seconds(), "failover-max-s")
	}
	b.ReportMetric(float64(len(f.tries)), "tries")
	b.ReportMetric(float64(f.timeouts), "timeouts")
	for _, e := range f.errs {
		b.Log(e)
	}
}

// add counts one try's outcome.
func (f *failover) add(b *testing.B, d time.Duration, err error) {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		f.timeouts++
	case err != nil:
		b.Errorf("%s failover: %v", f.system, err)
		f.errs = append(f.errs, err.Error())
	default:
		f.tries = append(f.tries, d)
	}
}

// lockstepFailover runs failTries of lockstep's tries in a row.
func lockstepFailover(b *testing.B, try FailoverTry) *failover {
	f := &failover{system: "lockstep"}
	for i := range failTries {
		d, err := try(i)
		f.add(b, d, err)
	}
	slices.Sort(f.tries)
	f.note = "a child process holds and is SIGKILLed 1.0-1.8 s after it acquired, across its 1 s TTL-pass cycle; in-process successor; tries run one after another"
	return f
}

// FailPhase is how long try i waits before the kill: one period, plus i
// fifths of it, so that the tries kill at different points of the holder's
// liveness cycle (TTL pass or session renewal) instead of all right after
// its start.
func FailPhase(i int, period time.Duration) time.Duration {
	return period + period*time.Duration(i)/failTries
}

// cliFailover runs failTries tries side by side, each on its own prefix:
// holder A runs `consul lock` around a long sleep, contender B waits at the
// same prefix, A's process group is SIGKILLed, and the try times kill ->
// B's child stamping its start.
func cliFailover(b *testing.B, srv *consultest.Server) *failover {
	dir := b.TempDir()
	f := &failover{system: "consul lock -n 1",
		note: fmt.Sprintf("%d tries run side by side, each on its own prefix; holder killed 7.5-13.5 s "+
			"after it started, across its 7.5 s session-renew cycle", failTries)}
	type res struct {
		d   time.Duration
		err error
	}
	out := make(chan res, failTries)
	for i := range failTries {
		go func() {
			d, err := cliFailoverTry(srv, filepath.Join(dir, fmt.Sprintf("try%d", i)), i)
			out <- res{d, err}
		}()
	}
	for range failTries {
		r := <-out
		f.add(b, r.d, r.err)
	}
	slices.Sort(f.tries)
	return f
}

func cliFailoverTry(srv *consultest.Server, file string, i int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), TryCap+30*time.Second)
	defer cancel()
	c := srv.Client()
	prefix := fmt.Sprintf("bench/cli-failover/%d", i)
	a := cliCmd(ctx, srv.HTTPAddr, prefix, fmt.Sprintf("bench-fo-%d-a", i), "sh", "-c", stampScript(file+".a", "")+"; exec sleep 120")
	if err := a.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = syscall.Kill(-a.Process.Pid, syscall.SIGKILL); _ = a.Wait() }()
	if !benchkit.Poll(30*time.Second, func() bool { s, _, _ := readStamps(file + ".a"); return !s.IsZero() }) {
		return 0, errors.New("holder A did not start within 30s")
	}
	bName := fmt.Sprintf("bench-fo-%d-b", i)
	bc := cliCmd(ctx, srv.HTTPAddr, prefix, bName, "sh", "-c", stampScript(file+".b", ""))
	if err := bc.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = syscall.Kill(-bc.Process.Pid, syscall.SIGKILL); _ = bc.Wait() }()
	if !benchkit.Poll(30*time.Second, func() bool {
		ss, _, err := c.Session().List(nil)
		return err == nil && slices.ContainsFunc(ss, func(s *api.SessionEntry) bool { return s.Name == bName })
	}) {
		return 0, errors.New("contender B made no session within 30s")
	}
	time.Sleep(FailPhase(i, 15*time.Second/2)) // the CLI renews every TTL/2
	killed := time.Now()
	if err := syscall.Kill(-a.Process.Pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	var started time.Time
	if !benchkit.Poll(TryCap, func() bool { started, _, _ = readStamps(file + ".b"); return !started.IsZero() }) {
		return 0, context.DeadlineExceeded
	}
	_, _ = c.KV().DeleteTree(prefix+"/", nil)
	return started.Sub(killed), nil
}
