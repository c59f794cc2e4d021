package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
		if v.Type != "bind" {
			continue
		}
		real, err := resolve(v.Source)
		if err != nil {
			return fmt.Errorf("spec bind-mounts %s, which cannot be checked against --allow-bind: %w", v.Source, err)
		}
		if !a.bindAllowed(real) {
			if real != filepath.Clean(v.Source) {
				return fmt.Errorf("spec bind-mounts %s, a symlink to %s, which is outside --allow-bind %v", v.Source, real, a.BindPrefixes)
			}
			return fmt.Errorf("spec bind-mounts %s, which is outside --allow-bind %v", v.Source, a.BindPrefixes)
		}
	}
	binds := specBinds(c.Volumes, "spec")
	return checkNesting(binds, binds)
}

// bindAllowed says whether real, a resolved path, lies under a prefix,
// itself resolved: a symlink that leads out of the allow-list (which a
// container given the prefix read-write could plant for the next spec to
// bind) is judged by where it leads, as Docker will follow it.
func (a Allow) bindAllowed(real string) bool {
	for _, p := range a.BindPrefixes {
		if rp, err := resolve(p); err == nil {
			p = rp
		}
		p = filepath.Clean(p)
		if real == p || strings.HasPrefix(real, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// resolve follows the symlinks of the longest part of path that exists, as
// the agent sees the host, and appends the rest: Docker creates a missing
// bind source, so a path that does not exist yet is judged as written.
func resolve(path string) (string, error) {
	path = filepath.Clean(path)
	rest := ""
	for dir := path; ; dir = filepath.Dir(dir) {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if _, lerr := os.Lstat(dir); lerr == nil {
			// It exists but leads nowhere: a dangling symlink, which
			// Docker would follow to create its target wherever it points.
			return "", fmt.Errorf("%s is a symlink to a path that does not exist", dir)
		}
		if dir == "/" || dir == "." {
			return path, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}
