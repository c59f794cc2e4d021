package agentbench

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/benchkit"
	"github.com/rollagent/rollagent/internal/consultest"
)

// mdEnv names the Markdown file the blocks are written into.
const mdEnv = "AGENT_BENCH_MD"

// header says how and where the block of bench was generated.
func header(bench string) string {
	cmd := fmt.Sprintf("go test -run '^$' -bench '%s' -benchtime 1x -timeout 30m ./agent/", bench)
	return benchkit.Generated(benchkit.Report{Env: mdEnv}.Command(cmd), time.Now(), false) +
		fmt.Sprintf("Consul %s, %s, %d CPUs.\n\n", consultest.Version, benchkit.Platform(), runtime.NumCPU())
}

// publish prints md and writes it into the file AGENT_BENCH_MD names, if
// set, as the block named "agent bench <name>".
func publish(b *testing.B, name, md string) {
	benchkit.Report{Env: mdEnv, Name: "agent bench " + name}.Publish(b, md)
}
