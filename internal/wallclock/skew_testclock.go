//go:build rollagent_testclock

package wallclock

import (
	"fmt"
	"os"
	"time"
)

// EnvSkew names the variable a rollagent_testclock build reads its skew
// from, a Go duration ("-7m30s"): the nemesis gives each host its own.
const EnvSkew = "ROLLAGENT_TEST_CLOCK_SKEW"

func init() {
	v := os.Getenv(EnvSkew)
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		// A test build run with a skew it cannot read must not run
		// without one, unnoticed.
		fmt.Fprintf(os.Stderr, "%s=%q: %v\n", EnvSkew, v, err)
		os.Exit(2)
	}
	skew = d
}
