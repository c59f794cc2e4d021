package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// maxAfterWalk bounds the groups a commit reads to find a cycle of
// update.after: each is one read of its desired record and its spec.
const maxAfterWalk = 256

// checkAfter refuses a commit to group whose update.after (after) would
// close a cycle: it follows the named groups' desired specs, and their
// update.after, back to group. A named group with nothing committed ends
// its path: it waits for nothing yet, and the group that names it holds
// ("waiting for group X (nothing committed)") until it has converged.
// Two commits that cross (each naming the other, read before the other
// landed) are not seen here; the gate names such a cycle when it holds.
func (s *Store) checkAfter(ctx context.Context, group string, after []string) error {
	if slices.Contains(after, group) {
		return fmt.Errorf("%w: group %s names itself; nothing committed", ErrAfterCycle, group)
	}
	// from[g] is the group whose update.after named g first, to tell the
	// path back.
	from := map[string]string{}
	queue := []string{}
	for _, g := range after {
		if _, ok := from[g]; !ok {
			from[g] = group
			queue = append(queue, g)
		}
	}
	for len(queue) > 0 {
		if len(from) > maxAfterWalk {
			return fmt.Errorf("update.after: more than %d groups wait for one another; nothing committed", maxAfterWalk)
		}
		g := queue[0]
		queue = queue[1:]
		next, err := s.desiredAfter(ctx, g)
		if err != nil {
			return fmt.Errorf("update.after: cannot read group %s to check for a cycle: %w; nothing committed", g, err)
		}
		for _, n := range next {
			if n == group {
				return fmt.Errorf("%w: %s; nothing committed", ErrAfterCycle, afterPath(group, g, from))
			}
			if _, ok := from[n]; !ok {
				from[n] = g
				queue = append(queue, n)
			}
		}
	}
	return nil
}

// afterPath says how group would wait for itself: through last, which
// waits for group, back along from.
func afterPath(group, last string, from map[string]string) string {
	path := []string{group, last}
	for g := last; from[g] != group; g = from[g] {
		path = slices.Insert(path, 1, from[g])
	}
	parts := make([]string, len(path))
	for i, g := range path {
		parts[i] = "group " + g
	}
	return strings.Join(parts, " waits for ") + ", which waits for group " + group
}

// desiredAfter is the update.after of group's desired spec: nil when
// nothing is committed, or its spec is not in history.
func (s *Store) desiredAfter(ctx context.Context, group string) ([]string, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	cur, pair, err := s.readDesired(ctx, k)
	if err != nil && pair == nil {
		return nil, err
	}
	if cur == nil {
		return nil, nil
	}
	p, _, err := s.Get(ctx, k.History(cur.SHA), nil)
	if err != nil || p == nil {
		return nil, err
	}
	var h HistoryEntry
	if err := decode(p.Key, p.Value, &h); err != nil {
		return nil, err
	}
	if spec := h.Decoded(); spec != nil {
		return spec.Update.After, nil
	}
	return nil, nil
}
