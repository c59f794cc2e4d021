package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// defaultHookPath is the PATH a hook gets when the agent has none.
const defaultHookPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ErrHookEnv means a name passed through to the hooks is refused.
var ErrHookEnv = errors.New("refused as a hook environment variable")

// CheckHookEnv checks the names an operator passes through to the hooks
// (Exec.PassEnv). CONSUL_* names are refused: CONSUL_HTTP_TOKEN is the
// agent's token, and a hook, or a workload it leaves running, must not
// hold it; ROLLAGENT_* names are refused too (ROLLAGENT_TOKEN is a token,
// and the agent sets the ones a hook reads); PATH is passed always.
func CheckHookEnv(names []string) error {
	for _, n := range names {
		up := strings.ToUpper(n)
		switch {
		case n == "" || strings.ContainsAny(n, "=\x00"):
			return fmt.Errorf("%q %w: not a variable name", n, ErrHookEnv)
		case strings.HasPrefix(up, "CONSUL_"):
			return fmt.Errorf("%s %w: CONSUL_* variables carry the agent's Consul address and token, which a hook must not get", n, ErrHookEnv)
		case strings.HasPrefix(up, "ROLLAGENT_"):
			return fmt.Errorf("%s %w: ROLLAGENT_* variables are the agent's own (ROLLAGENT_TOKEN is a token); the hooks get ROLLAGENT_GROUP, ROLLAGENT_NODE, ROLLAGENT_SHA and ROLLAGENT_SPEC from the agent", n, ErrHookEnv)
		case up == "PATH":
			return fmt.Errorf("%s %w: PATH is passed always", n, ErrHookEnv)
		}
	}
	return nil
}

// hookEnv is a hook's whole environment: PATH (the agent's, else
// defaultHookPath), the names in pass that are set in environ, and the
// ROLLAGENT_* variables of the run, last so that they win. Nothing else of
// the agent's environment: it holds the agent's Consul token.
func hookEnv(environ, pass []string, group, node, sha, spec string) []string {
	path := defaultHookPath
	var out []string
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
		case name == "PATH":
			path = val
		case slices.Contains(pass, name) && CheckHookEnv([]string{name}) == nil:
			out = append(out, kv)
		}
	}
	return append(append([]string{"PATH=" + path}, out...), "ROLLAGENT_GROUP="+group, "ROLLAGENT_NODE="+node,
		"ROLLAGENT_SHA="+sha, "ROLLAGENT_SPEC="+spec)
}
