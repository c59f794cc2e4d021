package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/rollagent/rollagent/hashspec"
)

// Docker resolves a bind source again at every start of the container:
// one its restart policy makes, a daemon restart, a reboot. Whoever can
// write a directory that the resolution looks a name up in can turn that
// name into a symlink by then, and the next start follows it, out of any
// --allow-bind prefix. So a bind source must not be looked up through a
// directory at or under a source that any workload mounts read-write.

// hostMount is a host path that a workload mounts.
type hostMount struct {
	Source   string
	Writable bool
	// Owner names the workload in an error: "this spec", "container x".
	Owner string
}

// maxLinks bounds the symlinks one resolution follows, as Linux does.
const maxLinks = 40

// errLinkLoop is a resolution that follows more than maxLinks symlinks.
var errLinkLoop = errors.New("too many levels of symbolic links")

// lookupDirs returns every directory, resolved, in which resolving path
// looks a name up, as the kernel does: the parents of each component,
// those reached through symlinks included. What does not exist yet is
// taken as written, a directory each.
func lookupDirs(path string) ([]string, error) {
	todo := splitPath(filepath.Clean(path))
	var dirs []string
	cur, links := "/", 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		dirs = append(dirs, cur)
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			for _, rest := range todo {
				dirs = append(dirs, next)
				next = filepath.Join(next, rest)
			}
			return dirs, nil
		case err != nil:
			return nil, err
		case fi.Mode()&fs.ModeSymlink == 0:
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return nil, fmt.Errorf("%s: %w", path, errLinkLoop)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return nil, err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(splitPath(target), todo...)
	}
	return dirs, nil
}

func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// within says whether p is dir or lies under it; both are clean.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// checkNesting refuses a mount of binds whose source is looked up in a
// directory at or under the source of one of writers mounted read-write.
// A mount of the very source a writer mounts is fine: the mount point
// itself cannot be replaced from inside a container.
func checkNesting(binds, writers []hostMount) error {
	for _, b := range binds {
		dirs, err := lookupDirs(b.Source)
		if err != nil {
			return fmt.Errorf("%s bind-mounts %s, which cannot be checked: %w", b.Owner, b.Source, err)
		}
		for _, w := range writers {
			if !w.Writable {
				continue
			}
			ws, err := resolve(w.Source)
			if err != nil {
				ws = filepath.Clean(w.Source)
			}
			for _, d := range dirs {
				if within(d, ws) {
					return nestedError(b, w)
				}
			}
		}
	}
	return nil
}

func nestedError(b, w hostMount) error {
	return fmt.Errorf("%s bind-mounts %s, which lies inside %s, mounted read-write by %s: "+
		"a workload could replace a directory on that path with a symlink, and Docker would follow it "+
		"at the container's next start (its restart policy, a daemon restart, a reboot); "+
		"bind %s itself or a path outside it", b.Owner, b.Source, w.Source, w.Owner, w.Source)
}

// specBinds lists a spec's bind mounts.
func specBinds(vols []hashspec.Volume, owner string) []hostMount {
	var out []hostMount
	for _, v := range vols {
		if v.Type == "bind" {
			out = append(out, hostMount{Source: v.Source, Writable: !v.ReadOnly, Owner: owner})
		}
	}
	return out
}

// checkHostMounts refuses spec when one of its bind sources is looked up
// through what another container of this daemon (any, managed or not)
// mounts read-write, or when it would mount read-write what another
// container's source is looked up through. skip is the ID of a container
// not to count: the one just created for spec. Checking again once the
// container exists closes the race of two agents creating at once: the
// later of the two checks sees the other's container.
func (d *Docker) checkHostMounts(ctx context.Context, spec *hashspec.Spec, skip string) error {
	ours := specBinds(spec.Container.Volumes, "spec")
	if len(ours) == 0 {
		return nil
	}
	list, err := d.api.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return d.dockerErr("list containers to check bind mounts", err)
	}
	var theirs []hostMount
	for _, c := range list {
		if c.ID == skip {
			continue
		}
		for _, m := range c.Mounts {
			if filepath.IsAbs(m.Source) {
				theirs = append(theirs, hostMount{Source: m.Source, Writable: m.RW, Owner: "container " + containerLabel(c)})
			}
		}
	}
	if err := checkNesting(ours, append(theirs, ours...)); err != nil {
		return err
	}
	return checkNesting(theirs, ours)
}

func containerLabel(c container.Summary) string {
	if len(c.Names) > 0 {
		return strings.TrimPrefix(c.Names[0], "/")
	}
	if len(c.ID) > 12 {
		return c.ID[:12]
	}
	return c.ID
}
