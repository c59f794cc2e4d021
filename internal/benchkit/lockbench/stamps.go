package lockbench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

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
