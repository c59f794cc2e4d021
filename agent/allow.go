package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
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
	// Volumes and Networks are patterns (path.Match) of the named Docker
	// volumes and networks a spec may use. Names are the daemon's, shared
	// by every group on the host: with none allowed by default, one
	// group's spec cannot mount another's data or join its network.
	Volumes  []string
	Networks []string
}

// Validate reports a malformed pattern, before any spec is judged by it.
func (a Allow) Validate() error {
	for _, f := range []struct {
		flag     string
		patterns []string
	}{{"--allow-volume", a.Volumes}, {"--allow-network", a.Networks}} {
		for _, p := range f.patterns {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				return fmt.Errorf("%s %q: not a pattern such as \"web-*\"", f.flag, p)
			}
		}
	}
	return nil
}

// matchAny says whether name matches one of patterns.
func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// checkNamed refuses named volumes and networks that no pattern allows.
func (a Allow) checkNamed(c *hashspec.Container) error {
	switch c.NetworkMode {
	case "", "bridge", "none", "host":
	default:
		if !matchAny(a.Networks, c.NetworkMode) {
			return fmt.Errorf("spec joins the Docker network %q, which no --allow-network pattern %v matches; start the agent with --allow-network %s to permit it",
				c.NetworkMode, a.Networks, c.NetworkMode)
		}
	}
	for _, v := range c.Volumes {
		if v.Type == "volume" && !matchAny(a.Volumes, v.Source) {
			return fmt.Errorf("spec mounts the Docker volume %q, which no --allow-volume pattern %v matches; start the agent with --allow-volume %s to permit it",
				v.Source, a.Volumes, v.Source)
		}
	}
	return nil
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
	if err := a.checkNamed(&c); err != nil {
		return err
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
