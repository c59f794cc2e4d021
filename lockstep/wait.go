package lockstep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// errRace means another contender changed the holders record between our
// read and our transaction: re-read and try again at once.
var errRace = errors.New("lockstep: holders record changed")

// waitTurn loops until this contender holds a slot. The head of the line
// watches the whole prefix; everyone else watches only its predecessor, so
// one release or death wakes one or two waiters, never the whole line.
func (m *Semaphore) waitTurn(ctx context.Context, g Gate) (*Hold, error) {
	r := retry{log: m.log}
	var next *snapshot // what the last wait already read, if it read the whole prefix
	for {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		snap := next
		if snap == nil {
			var err error
			if snap, err = m.read(ctx, 0); err != nil {
				r.wait(ctx, "read semaphore", err)
				continue
			}
		}
		if _, holds := snap.live()[m.s.ID()]; holds {
			return m.adopt(g)
		}
		pos, pred, ok := snap.position(m.s.ID())
		if !ok {
			m.s.lost("contender key is gone", nil)
			return nil, ErrSessionLost
		}
		if pos == 0 && len(snap.live()) < g.limit() {
			next = nil
			h, err := m.take(ctx, g, snap)
			switch {
			case err == nil:
				return h, nil
			case errors.Is(err, errRace):
			case isConsulErr(err):
				r.wait(ctx, "take slot", err)
			default:
				return nil, err
			}
			continue
		}
		var err error
		if next, err = m.waitChange(ctx, pred, snap.index); err != nil {
			r.wait(ctx, "wait in line", err)
			continue
		}
		r.reset()
	}
}

// read lists the prefix, blocking while its index is still index.
func (m *Semaphore) read(ctx context.Context, index uint64) (*snapshot, error) {
	pairs, meta, err := m.c.KV().List(m.opts.Prefix, m.blocking(ctx, index))
	if err != nil {
		return nil, consulErr{err}
	}
	return parseSnapshot(m.opts.Prefix, pairs, meta.LastIndex)
}

// waitChange blocks until pred changes, or for the head (pred == ""), until
// anything under the prefix changes. The head's wait reads the whole prefix,
// and returns it as the next snapshot, which saves a read per handoff.
func (m *Semaphore) waitChange(ctx context.Context, pred string, index uint64) (*snapshot, error) {
	if pred != "" {
		_, _, err := m.c.KV().Get(pred, m.blocking(ctx, index))
		if err != nil && ctx.Err() == nil {
			return nil, consulErr{err}
		}
		return nil, nil
	}
	snap, err := m.read(ctx, index)
	if err != nil && ctx.Err() == nil && isConsulErr(err) {
		return nil, err
	}
	if err != nil {
		return nil, nil // unreadable record or ctx done: the loop reads afresh or returns
	}
	return snap, nil
}

// take grants this contender a slot in one transaction: the gate is open,
// our session still locks our key, and the holders record is unchanged since
// we counted fewer than K live holders in it. It also rewrites our own key,
// which is what wakes our successor.
func (m *Semaphore) take(ctx context.Context, g Gate, snap *snapshot) (*Hold, error) {
	rec := holders{Holders: snap.live()}
	rec.Holders[m.s.ID()] = Entry{Name: m.opts.Name, State: "holding", Since: time.Now().UTC()}
	recJSON, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	ops := g.checkOps()
	base := len(ops)
	ops = append(ops,
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: m.key, Session: m.s.ID()}},
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: m.opts.Prefix + holdersKey, Value: recJSON, Index: snap.holdersIndex}},
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVLock, Key: m.key, Value: m.entry("holding"), Session: m.s.ID()}},
	)
	ok, resp, _, err := m.c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, consulErr{err}
	}
	if ok {
		return m.newHold(g, resp, rec), nil
	}
	op, what := firstTxnError(resp)
	switch {
	case op < 0 || isDenied(what):
		return nil, &TxnError{Op: op, What: what}
	case op < base:
		return nil, m.gateError(ctx, g, op)
	case op == base:
		m.s.lost("session no longer locks its contender key", nil)
		return nil, ErrSessionLost
	case op == base+1:
		return nil, errRace
	}
	return nil, &TxnError{Op: op, What: what}
}

// adopt takes over a slot the records say this session holds: a grant whose
// reply was lost to a Consul failure, or a release that never landed. Only
// one live Hold per Semaphore is allowed, so a second is an error.
func (m *Semaphore) adopt(g Gate) (*Hold, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active != nil {
		return nil, errors.New("lockstep: this contender already holds a slot; release it first")
	}
	m.log.Info("adopting a slot the records say we hold")
	m.active = startHold(m, g, 0)
	return m.active, nil
}

func isDenied(what string) bool { return strings.Contains(strings.ToLower(what), "permission denied") }

func firstTxnError(resp *api.TxnResponse) (int, string) {
	if resp == nil || len(resp.Errors) == 0 {
		return -1, "transaction rolled back without an error"
	}
	e := resp.Errors[0]
	for _, x := range resp.Errors[1:] {
		if x.OpIndex < e.OpIndex {
			e = x
		}
	}
	return e.OpIndex, e.What
}

// consulErr marks an error talking to Consul, which is retried with backoff,
// as opposed to an answer, which is acted on.
type consulErr struct{ err error }

func (e consulErr) Error() string { return fmt.Sprintf("lockstep: consul: %v", e.err) }
func (e consulErr) Unwrap() error { return e.err }

// IsTransient reports whether err is a failure to talk to Consul, such as
// during a leader election, as opposed to an answer such as a closed gate:
// the same call may succeed when retried.
func IsTransient(err error) bool { return isConsulErr(err) }

func isConsulErr(err error) bool {
	var c consulErr
	return errors.As(err, &c)
}
