package hashspec

import (
	"slices"
	"strconv"
)

// Last holds back the node on which a Consul check passes (the Swarm or
// Raft leader's) until every other node of its group has converged, so
// that leadership moves once, at the end of the rollout.
type Last struct {
	// Check is the name (or ID) of the Consul check that passes on the
	// node that goes last.
	Check string `json:"check"`
}

// MaxAfterGroups bounds update.after: each named group is read at every
// look of every agent of the group while it waits.
const MaxAfterGroups = 16

const (
	pathAfter     = "update.after"
	pathLast      = "update.last"
	pathLastCheck = pathLast + ".check"
)

// normalAfter sorts the groups and drops repeats: the order in which they
// are named means nothing (each must converge), so specs that name the
// same groups share a SHA.
func normalAfter(after []string) []string {
	if len(after) == 0 {
		return nil
	}
	return slices.Compact(slices.Sorted(slices.Values(after)))
}

// order checks update.after and update.last; name is the spec's group,
// which may not wait for itself (its own rollout would never begin).
func (c *checker) order(name string, u *Update) {
	if n := len(u.After); n > MaxAfterGroups {
		c.add(pathAfter, "must name at most %d groups, got %d", MaxAfterGroups, n)
	}
	for i, g := range u.After {
		f := indexPath(pathAfter, i)
		switch {
		case nameProblem(g) != "":
			c.add(f, "must be a group name: %s", nameProblem(g))
		case name != "" && g == name:
			c.add(f, "%s", selfAfterMsg(g))
		}
	}
	if u.Last == nil {
		return
	}
	if u.Last.Check == "" {
		c.add(pathLastCheck, "needs the name of a Consul check (the one that passes on the leader)")
		return
	}
	c.blockName(pathLastCheck, u.Last.Check)
}

// selfAfterError is the error of a spec whose update.after names its own
// name, at line (the line of update.after in the file), or nil. The
// decoders report it, with the line Validate cannot know; Validate
// refuses it too, for a name given from outside the file (the command's
// group).
func selfAfterError(s *Spec, filename string, line int) error {
	if s.Name == "" {
		return nil
	}
	i := slices.Index(s.Update.After, s.Name)
	if i < 0 {
		return nil
	}
	f := indexPath(pathAfter, i)
	return &ParseError{Filename: filename, Line: line, Field: f, Msg: selfAfterMsg(s.Name)}
}

func selfAfterMsg(group string) string {
	return "names the spec's own group " + strconv.Quote(group) + ": a group cannot wait for its own rollout"
}
