package benchkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux platform Go supports.
const clockTick = 10 * time.Millisecond

// ProcStat is what /proc says of one process.
type ProcStat struct {
	RSSKB    int64
	CPU      time.Duration // utime + stime
	OnCPU    time.Duration // sum of the live threads' schedstat run time
	Children time.Duration // cutime + cstime
}

// ReadProcStat reads what /proc says of pid now.
func ReadProcStat(pid int) (ProcStat, error) {
	var ps ProcStat
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			ps.RSSKB, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, err
	}
	// Fields after the command name, which is in parentheses and may
	// contain spaces: state is field 3, utime..cstime are 14..17.
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return ps, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i-3], 10, 64)
		return time.Duration(n) * clockTick
	}
	ps.CPU, ps.Children = tick(14)+tick(15), tick(16)+tick(17)
	ps.OnCPU, err = onCPU(pid)
	return ps, err
}

// onCPU sums the first field of each thread's schedstat: nanoseconds spent
// on a CPU, far finer than utime and stime. A thread that exited is missed,
// which Go's long-lived threads make rare.
func onCPU(pid int) (time.Duration, error) {
	paths, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(paths) == 0 {
		return 0, fmt.Errorf("schedstat of %d: %v", pid, err)
	}
	var sum time.Duration
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += time.Duration(n)
		}
	}
	return sum, nil
}
