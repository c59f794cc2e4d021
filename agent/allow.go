package agent

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/rollagent/rollagent/hashspec"
)

// Allow lists what a spec may ask of the host. A spec is data in Consul
// that anyone with KV write access can change, so by default it gets no
// more than an unprivileged container: the operator of each host opts in.
type Allow struct {
	Privileged  bool
	HostNetwork bool
	HostPID     bool
	// BindPrefixes are host paths under which bind mounts are allowed.
	BindPrefixes []string
}

// Check refuses a spec that asks for more than the host allows, naming the
// flag that would allow it.
func (a Allow) Check(spec *hashspec.Spec) error {
	c := spec.Container
	switch {
	case c.Privileged && !a.Privileged:
		return fmt.Errorf("spec asks for a privileged container; start the agent with --allow-privileged to permit it")
	case c.NetworkMode == "host" && !a.HostNetwork:
		return fmt.Errorf("spec asks for the host network; start the agent with --allow-host-network to permit it")
	case c.PIDMode == "host" && !a.HostPID:
		return fmt.Errorf("spec asks for the host PID namespace; start the agent with --allow-host-pid to permit it")
	}
	for _, v := range c.Volumes {
		if v.Type == "bind" && !a.bindAllowed(v.Source) {
			return fmt.Errorf("spec bind-mounts %s, which is outside --allow-bind %v", v.Source, a.BindPrefixes)
		}
	}
	return nil
}

func (a Allow) bindAllowed(src string) bool {
	src = filepath.Clean(src)
	for _, p := range a.BindPrefixes {
		p = filepath.Clean(p)
		if src == p || strings.HasPrefix(src, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}
