package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/wallclock"
)

// DefaultEventLimit bounds a group's event log: after an append, the writer
// deletes the oldest events beyond it. An event is 300 to 400 bytes, about
// 600 in a listing (base64 and the key), so a full log adds some 300 KB to
// the group's tree that status lists; no agent's query reads it.
const DefaultEventLimit = 500

// DefaultNodeEventLimit bounds each node's part of the log, which its
// agent prunes after each append as the operators prune theirs: a node
// writes a failure per SHA it fails to reach, and the pause or rollback
// one of them made, and with a thousand nodes their parts add up to what
// status lists. No writer's appends push out another's events.
const DefaultNodeEventLimit = 20

// maxTxnOps is Consul's limit on the operations of one transaction.
const maxTxnOps = 64

// EventKind says what happened to a group.
type EventKind string

// The kinds of event in a group's log.
const (
	EventCommit       EventKind = "commit"        // rollagent commit
	EventRollback     EventKind = "rollback"      // rollagent rollback
	EventAutoRollback EventKind = "auto-rollback" // an agent's failure_action=rollback
	EventCancel       EventKind = "cancel"        // rollagent cancel
	EventResume       EventKind = "resume"        // rollagent resume
	EventPause        EventKind = "pause"         // rollagent pause, or an agent's failure reached max_failures
	EventFailure      EventKind = "failure"       // a node's failure, counted once per node and SHA
	EventNodeRemoved  EventKind = "node-removed"  // rollagent node rm
	EventDeadline     EventKind = "deadline"      // an agent saw the progress deadline pass
	EventPromote      EventKind = "promote"       // rollagent promote
)

// Valid reports whether k is one of the kinds above.
func (k EventKind) Valid() bool {
	switch k {
	case EventCommit, EventRollback, EventAutoRollback, EventCancel, EventResume,
		EventPause, EventFailure, EventNodeRemoved, EventDeadline, EventPromote:
		return true
	}
	return false
}

// Event is one entry of a group's log, the value of a key in one writer's
// part of it (Keys.OperatorEvents, Keys.NodeEvents).
type Event struct {
	Kind   EventKind `json:"kind"`
	At     time.Time `json:"at"`
	By     string    `json:"by"`             // user@host, or agent:<node>
	SHA    string    `json:"sha,omitempty"`  // the SHA acted on; of a commit or rollback, the one made desired
	From   string    `json:"from,omitempty"` // of a commit or rollback, the SHA desired before
	Node   string    `json:"node,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

func (e *Event) check() error {
	if !e.Kind.Valid() {
		return fmt.Errorf("kind %q is not one of the known kinds", e.Kind)
	}
	if e.At.IsZero() {
		return fmt.Errorf("no time")
	}
	if e.Node != "" {
		if err := hashspec.ValidateName(e.Node); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if err := checkSHA("sha", e.SHA, true); err != nil {
		return err
	}
	return checkSHA("from", e.From, true)
}

// AgentBy is the By of an event an agent writes.
func AgentBy(node string) string { return "agent:" + node }

// byAgent says whether an agent writes events of kind k: the others are
// the CLI's, which an operator's token writes.
func (k EventKind) byAgent() bool {
	return k == EventFailure || k == EventPause || k == EventAutoRollback || k == EventDeadline
}

// WriterKind says whose part of the log an event was written in.
type WriterKind string

// Values of WriterKind; they are part of `history -o json`.
const (
	WriterOperator WriterKind = "operator" // Keys.OperatorEvents
	WriterNode     WriterKind = "node"     // Keys.NodeEvents
	// WriterUnknown is outside both, as every event was before the log
	// had a part per writer: any token that wrote events/ could have.
	WriterUnknown WriterKind = "unknown"
)

// Writer is whose part of the log an event is in, which the token that
// wrote it decides (see docs/examples/acl-policy.hcl), not the event.
type Writer struct {
	Kind WriterKind `json:"kind"`
	Node string     `json:"node,omitempty"` // of WriterNode
}

// OperatorWriter writes the CLI's events.
func OperatorWriter() Writer { return Writer{Kind: WriterOperator} }

// NodeWriter writes the events of node's agent.
func NodeWriter(node string) Writer { return Writer{Kind: WriterNode, Node: node} }

// eventsOf is w's part of the log.
func (k Keys) eventsOf(w Writer) string {
	if w.Kind == WriterNode {
		return k.NodeEvents(w.Node)
	}
	return k.OperatorEvents()
}

// writerOf tells whose part of the log key is in.
func (k Keys) writerOf(key string) Writer {
	if strings.HasPrefix(key, k.OperatorEvents()) {
		return OperatorWriter()
	}
	if rest, ok := strings.CutPrefix(key, k.NodeEventsPrefix()); ok {
		if node, _, ok := strings.Cut(rest, "/"); ok && node != "" {
			return NodeWriter(node)
		}
	}
	return Writer{Kind: WriterUnknown}
}

// LoggedEvent is an event as read back, with where and when Consul stored it.
type LoggedEvent struct {
	Event
	Key         string `json:"key"`
	CreateIndex uint64 `json:"create_index"`
	Writer      Writer `json:"writer"`
	// Vouched says that where the event was written backs what it says of
	// itself: an operator's part, or a node's part holding what an agent
	// writes (a failure, a pause, a rollback) by that node's agent. Any
	// other is only its writer's claim: a node's "commit by alice" is no
	// commit of alice's.
	Vouched bool `json:"vouched"`
}

// vouched says whether w's part of the log backs e; see LoggedEvent.
func vouched(w Writer, e Event) bool {
	switch w.Kind {
	case WriterOperator:
		return true
	case WriterNode:
		return e.Kind.byAgent() && e.By == AgentBy(w.Node)
	}
	return false
}

// EventLog is a group's log as read, oldest first, in the order Consul
// applied the writes. Problems lists the records that do not decode,
// which are left out.
type EventLog struct {
	Events   []LoggedEvent
	Problems []string
}

// eventOps create one key per event in w's part of the log, in the order
// given; the key starts with the time, for a person reading the keys
// (history and pruning go by Consul's order, which no clock sets), and
// ends with a random part and the
// position, so that two writers never create the same key. Create-only
// (CAS at index 0): a key that exists fails the transaction rather than
// lose an event.
func eventOps(k Keys, w Writer, evs ...Event) api.TxnOps {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	at := wallclock.Now()
	if len(evs) > 0 && !evs[0].At.IsZero() {
		at = evs[0].At // the writer's clock, as the event says
	}
	id := fmt.Sprintf("%020d-%s", at.UnixNano(), hex.EncodeToString(b[:]))
	ops := make(api.TxnOps, 0, len(evs))
	for i, e := range evs {
		if e.At.IsZero() {
			e.At = wallclock.Now().UTC()
		}
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Index: 0,
			Key: k.eventsOf(w) + fmt.Sprintf("%s-%d", id, i), Value: mustJSON(e)}})
	}
	return ops
}

// EventOp is the txn op that appends e to the operators' part of group's
// log, for a caller that appends it inside the transaction of the action
// (rollagent node rm), so that the event is logged if and only if the
// action happened. Call PruneEvents after the transaction went through.
func (s *Store) EventOp(group string, e Event) (*api.TxnOp, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	if e.At.IsZero() {
		e.At = wallclock.Now().UTC()
	}
	if err := e.check(); err != nil {
		return nil, fmt.Errorf("event: %w", err)
	}
	return eventOps(k, OperatorWriter(), e)[0], nil
}

// AppendEvent appends e to the operators' part of group's log on its own,
// then prunes that part.
func (s *Store) AppendEvent(ctx context.Context, group string, e Event) error {
	op, err := s.EventOp(group, e)
	if err != nil {
		return err
	}
	if _, _, err := s.txn(ctx, api.TxnOps{op}); err != nil {
		return err
	}
	return s.PruneEvents(ctx, group)
}

// PruneEvents deletes the oldest events of the operators' part of group's
// log beyond the store's limit.
func (s *Store) PruneEvents(ctx context.Context, group string) error {
	return s.pruneEvents(ctx, group, OperatorWriter())
}

// pruneEvents deletes the oldest events of w's part of group's log beyond
// its limit, and nothing of another's: keys that a writer chose cannot
// push out another writer's events. Writers call it after each append;
// one that fails leaves a few extra events, which the next append deletes.
func (s *Store) pruneEvents(ctx context.Context, group string, w Writer) error {
	k, err := s.Keys(group)
	if err != nil {
		return err
	}
	pairs, _, err := s.list(withReadLimit(ctx, pruneReadLimit), k.eventsOf(w), nil)
	if err != nil {
		return err
	}
	for _, batch := range pruneBatches(appliedOrder(pairs), s.eventLimit(w)) {
		ops := make(api.TxnOps, 0, len(batch))
		for _, key := range batch {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: key}})
		}
		if _, _, err := s.txn(ctx, ops); err != nil {
			return err
		}
	}
	return nil
}

// pruneReadLimit bounds the listing of one writer's part that pruning
// reads: past it, that writer's part is left as it is (only its own
// writer can fill it).
const pruneReadLimit = 4 << 20

// appliedOrder are the keys of pairs in the order Consul applied them
// (CreateIndex, then key within one transaction), oldest first. Not the
// keys' own order: a key starts with its writer's wall clock, and a host
// whose clock is behind would have its newest event pruned first.
func appliedOrder(pairs api.KVPairs) []string {
	sortApplied(pairs)
	keys := make([]string, len(pairs))
	for i, p := range pairs {
		keys[i] = p.Key
	}
	return keys
}

// pruneBatches are the keys to delete to keep the newest limit of keys,
// given oldest first, in batches Consul takes in one transaction.
func pruneBatches(keys []string, limit int) [][]string {
	if len(keys) <= limit {
		return nil
	}
	old := keys[:len(keys)-limit]
	var out [][]string
	for len(old) > 0 {
		n := min(len(old), maxTxnOps)
		out = append(out, old[:n])
		old = old[n:]
	}
	return out
}

// prune is pruneEvents after an action's transaction: best effort, as the
// action happened whatever pruning does.
func (s *Store) prune(ctx context.Context, group string, w Writer) { _ = s.pruneEvents(ctx, group, w) }

// sortApplied sorts pairs in the order Consul applied them, oldest first
// (see appliedOrder).
func sortApplied(pairs api.KVPairs) {
	sort.SliceStable(pairs, func(i, j int) bool {
		if pairs[i].CreateIndex != pairs[j].CreateIndex {
			return pairs[i].CreateIndex < pairs[j].CreateIndex
		}
		return pairs[i].Key < pairs[j].Key
	})
}
