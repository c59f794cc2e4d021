package lockstep

import (
	"context"
	"errors"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/internal/readlimit"
)

const (
	// folderNamesLimit bounds a listing of the names in one name's
	// folder, when the names under the prefix are over namesLimit.
	folderNamesLimit = 64 << 10
	// slotNamesLimit bounds the names of the slot keys: every number a
	// reader counts (below 65536) fits in it.
	slotNamesLimit = 4 << 20
)

// listed is the names readSplit reads by, and what their listing left
// out: names whose holder folder was over its bound (each counts as
// holding) and folders that count for no one.
type listed struct {
	names   []string
	index   uint64
	busy    []string
	ignored []string
}

// listNames lists the names under prefix, at once under namesLimit, else
// folder by folder (byFolder): a name's token may write keys with long
// names in its own folders, and one listing of them all would fail every
// read of the group.
// Once over, the names are listed by folder until a read leaves nothing
// unread (readWait).
func (m *Semaphore) listNames(ctx context.Context, prefix string) (listed, error) {
	if m.folders.Load() {
		return m.byFolder(ctx, prefix)
	}
	names, meta, err := m.c.KV().Keys(prefix, "", bounded(ctx, namesLimit))
	var tl *readlimit.TooLargeError
	switch {
	case errors.As(err, &tl):
		m.folders.Store(true)
		return m.byFolder(ctx, prefix)
	case err != nil:
		return listed{}, consulErr{err}
	}
	return listed{names: names, index: meta.LastIndex}, nil
}

// byFolder lists the names under prefix one folder at a time: the top
// level, then P/.holders/ and P/c/ by name, then each name's folder under
// folderNamesLimit. A holder folder over it counts as its name holding, a
// contender folder over it for no one; the slot keys' folder, shared by
// every name, must fit slotNamesLimit, or the read fails (ErrUnreadable):
// a claim left unlisted would not count.
func (m *Semaphore) byFolder(ctx context.Context, prefix string) (listed, error) {
	root := m.opts.Prefix
	var l listed
	dirs := []string{root + holderPrefix}
	if prefix == root {
		top, err := m.keys(ctx, &l, root, "/", namesLimit)
		if err != nil {
			return l, err
		}
		dirs = nil
		for _, t := range top {
			switch {
			case t == root+holderPrefix || t == root+contenderPrefix:
				dirs = append(dirs, t)
			case strings.HasSuffix(t, "/"):
				l.ignored = append(l.ignored, t)
			default:
				l.names = append(l.names, t)
			}
		}
	}
	for _, dir := range dirs {
		sub, err := m.keys(ctx, &l, dir, "/", namesLimit)
		if err != nil {
			return l, err
		}
		for _, f := range sub {
			if !strings.HasSuffix(f, "/") {
				l.names = append(l.names, f)
				continue
			}
			if err := m.folder(ctx, &l, dir, f); err != nil {
				return l, err
			}
		}
	}
	return l, nil
}

// folder lists f, a folder under dir, into l.
func (m *Semaphore) folder(ctx context.Context, l *listed, dir, f string) error {
	limit := int64(folderNamesLimit)
	if f == m.opts.Prefix+slotsPrefix {
		limit = slotNamesLimit
	}
	names, err := m.keys(ctx, l, f, "", limit)
	var tl *readlimit.TooLargeError
	switch {
	case errors.As(err, &tl) && limit == folderNamesLimit && dir == m.opts.Prefix+holderPrefix:
		l.busy = append(l.busy, strings.TrimSuffix(strings.TrimPrefix(f, dir), "/"))
	case errors.As(err, &tl) && limit == folderNamesLimit:
		l.ignored = append(l.ignored, f)
	case err != nil:
		return err
	}
	l.names = append(l.names, names...)
	return nil
}

// keys lists the names under key (up to sep), under limit, raising l's
// index to the listing's. One over limit is returned as a
// *readlimit.TooLargeError wrapped in ErrUnreadable.
func (m *Semaphore) keys(ctx context.Context, l *listed, key, sep string, limit int64) ([]string, error) {
	names, meta, err := m.c.KV().Keys(key, sep, bounded(ctx, limit))
	if err != nil {
		return nil, unreadable(err, key, "the names of its keys")
	}
	l.index = max(l.index, meta.LastIndex)
	return names, nil
}

// bounded is a query made with ctx, whose answer is bounded to limit.
func bounded(ctx context.Context, limit int64) *api.QueryOptions {
	return (&api.QueryOptions{}).WithContext(readlimit.With(ctx, limit))
}
