package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/lockstep"
)

var (
	// ErrNodeAlive means a node asked to be removed still shows signs of
	// life; RemoveNode removes it only when forced.
	ErrNodeAlive = errors.New("coordinator: the node is alive")
	// ErrNoSuchNode means the group has no record of the node.
	ErrNoSuchNode = errors.New("coordinator: the group has no record of this node")
)

// Removal says what RemoveNode did.
type Removal struct {
	Group, Node string
	// Alive are the signs of life it was removed despite (forced).
	Alive []string
	// Claim is the node's claim on a slot, which RemoveNode leaves in
	// place: it ends as every claim does (see lockstep.Claim).
	Claim *lockstep.Claim
	At    time.Time
}

// NodeAlive lists the signs that node's agent is alive, as Consul shows
// them: its service instance is in the catalog (nil registered: the
// catalog could not be read, which is no proof of death), or its session
// is in line or holds a slot, or its claim on a slot still counts.
func NodeAlive(group, node string, registered map[string]bool, h *lockstep.Holders) []string {
	var out []string
	switch {
	case registered == nil:
		out = append(out, "Consul's catalog could not be read, so it may be registered")
	case registered[node]:
		out = append(out, fmt.Sprintf("its instance of service %s is registered in Consul's catalog", ServiceName(group)))
	}
	if h == nil {
		return out
	}
	switch {
	case holding(h, node):
		out = append(out, "it holds a slot (its session is live)")
	case slices.Contains(slices.Collect(maps.Values(h.Names())), node):
		out = append(out, "it is in line for a slot (its session is live)")
	}
	if c, ok := h.ClaimOf(node); ok && !h.Live(c.Session) && slices.Contains(h.Counted(), node) {
		out = append(out, fmt.Sprintf("its claim on a slot counts against max_parallel until it is released, or reported lost by a node in line that saw it orphaned for its lease (not before about %s)", c.Until.Format(time.RFC3339)))
	}
	sort.Strings(out)
	return out
}

func holding(h *lockstep.Holders, node string) bool {
	for _, e := range h.Holding {
		if e.Name == node {
			return true
		}
	}
	return false
}

// RemoveNode deletes node's record, nodes/<node>, after checking that its
// agent shows no sign of life (NodeAlive) unless force. The delete is a CAS
// on the record as read: an agent that writes meanwhile is alive, and
// nothing is removed.
//
// The record goes, and a removal mark (Keys.Removed) takes its place in
// the same transaction: what the node left in Consul's catalog (a dead
// agent's service, its failing checks) no longer counts it down, until its
// agent writes a record again and the node is back in the group (Down).
//
// Nothing else goes. A failure record of the node stays: it is part of
// the count that paused the rollout, which `resume` lifts. A claim on a
// slot stays too: it belongs to lockstep and ends as every claim does, by
// the node's release or when the next waiter, having watched it orphaned
// for its whole lease, marks it lost; until then it counts against max_parallel, since a node
// left half replaced is down. Removal.Claim names it.
//
// The removal's event (EventNodeRemoved, by and reason) is logged in the
// same transaction: it is in the log if and only if the record went.
func (s *Store) RemoveNode(ctx context.Context, group, node string, force bool, by, reason string) (*Removal, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	if err := hashspec.ValidateName(node); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	gs, err := s.Read(ctx, group, nil)
	if err != nil {
		return nil, err
	}
	pair := gs.byKey[k.Node(node)]
	if pair == nil {
		return nil, fmt.Errorf("node %s of group %s: %w", node, group, ErrNoSuchNode)
	}
	registered, rerr := s.Registered(ctx, group)
	now := wallclock.Now()
	r := &Removal{Group: group, Node: node, At: now.UTC(), Alive: NodeAlive(group, node, registered, gs.Holders)}
	if len(r.Alive) > 0 && !force {
		msg := strings.Join(r.Alive, "; ")
		if rerr != nil {
			msg += " (" + rerr.Error() + ")"
		}
		return nil, fmt.Errorf("node %s of group %s: %w: %s; stop its agent (or let Consul reap it) first, or pass --force; nothing removed",
			node, group, ErrNodeAlive, msg)
	}
	if gs.Holders != nil {
		if c, ok := gs.Holders.ClaimOf(node); ok {
			r.Claim = &c
		}
	}
	ev, err := s.EventOp(group, Event{Kind: EventNodeRemoved, At: r.At, By: by, Node: node, Reason: removalReason(reason, r)})
	if err != nil {
		return nil, err
	}
	mark, err := json.Marshal(RemovedMark{Node: node, At: r.At, By: by, Reason: reason})
	if err != nil {
		return nil, err
	}
	if _, conflict, err := s.txn(ctx, removeNodeOps(k, pair, node, mark, ev)); err != nil {
		if conflict {
			return nil, fmt.Errorf("node %s of group %s: its record changed while removing it, so its agent is alive; nothing removed", node, group)
		}
		return nil, err
	}
	// Best effort, as after every append: the next one prunes what is left.
	s.prune(ctx, group, OperatorWriter())
	return r, nil
}

// removeNodeOps is RemoveNode's transaction: the CAS delete of the record
// as read, the removal mark in its place, and the removal's event.
func removeNodeOps(k Keys, pair *api.KVPair, node string, mark []byte, ev *api.TxnOp) api.TxnOps {
	return api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: pair.Key, Index: pair.ModifyIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: pair.Key}},
		// Its stop mark goes with its record: Down reads no record for it.
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k.Stopped(node)}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Removed(node), Value: mark}},
		// A grant under a percentage checks this key: none made on a look
		// that still counted the node gets through.
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k.Membership(), Value: mark}},
		ev,
	}
}

// RemovedMark is the value of Keys.Removed: who removed the node, when
// and why. It takes the node out of the count of nodes down until the
// node's agent writes a record again, which brings it back into the group.
type RemovedMark struct {
	Node   string    `json:"node"`
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
}

// removalReason is the event's reason: the operator's, and that the removal
// was forced past signs of life, which a reader of the log must see.
func removalReason(reason string, r *Removal) string {
	if len(r.Alive) == 0 {
		return reason
	}
	forced := "forced although " + strings.Join(r.Alive, "; ")
	if reason == "" {
		return forced
	}
	return reason + " (" + forced + ")"
}
