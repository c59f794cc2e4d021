package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/hashspec"
	"github.com/rollagent/rollagent/lockstep"
)

// GroupState is everything rollagent keeps about one group, read at one
// Consul index. Records that fail to decode are listed in Problems and
// otherwise ignored: they are reported, never acted on.
type GroupState struct {
	Group string
	Index uint64 // X-Consul-Index of the read

	Desired     *Desired
	DesiredPair *api.KVPair
	Spec        *hashspec.Spec // the desired spec from history
	Cancel      *Cancel        // CANCEL of the desired SHA
	Pause       *Pause         // pause of the desired SHA
	Failures    []Failure      // failures of the desired SHA
	Nodes       []NodeState    // sorted by node name
	History     []HistoryEntry // sorted by commit time
	Holders     *lockstep.Holders
	// Deadline says the progress deadline of the desired commit passed
	// (deadline/<sha>); nil while it has not.
	Deadline *Deadline
	// OperatorPause is an operator's pause of the desired SHA (Pause is
	// the one its failures made, which agents write).
	OperatorPause *OperatorPause
	// Unavailable are the nodes Consul sees down (Store.Unavailable), when
	// the reader asked (status does; the agents ask at the head of the line).
	Unavailable []string
	// DownWhy says why each of Unavailable is down (Store.Down).
	DownWhy map[string]DownReason
	// Registered are the nodes with an instance of the group's service in
	// Consul's catalog (Store.Registered), or nil when the reader did not
	// ask or could not tell: then no node is taken for gone.
	Registered map[string]bool
	// Domains are the nodes' topology domains (update.max_parallel_per,
	// Store.Domains), when the reader asked (status does).
	Domains map[string]string
	// Invalid are the node records that do not decode or check, by the
	// name in their key: status shows them as rows, nothing acts on them.
	Invalid []InvalidNode
	// Health is the health of the Consul checks the desired spec blocks
	// on (update.block_on), read with the records when it has any: by
	// Read for the group, by ReadFor with the node's own block_on_node.
	Health *GateHealth
	// MembershipIndex is the ModifyIndex of Keys.Membership as read, 0
	// when it does not exist: no node was ever removed.
	MembershipIndex uint64
	// NodeKeys is how many records a listing of nodes/ found, after the
	// records were read, for a reader that reads only its own (ReadFor)
	// under a percentage; 0 when every record was read.
	NodeKeys int
	// Released is when the reader first saw the slot's latest release
	// (update.stagger), filled by Store.Read and ReadFor.
	Released ReleaseSeen
	// Canaries are the desired SHA's canaries (update.canary), nil when
	// none were recorded; Promoted is an operator's promotion of it, or
	// the one an automatic rollback carries (autoRollbackPromotion).
	Canaries *Canaries
	Promoted *Promotion
	// promotionRecorded says Promoted is the promoted/<sha> record's:
	// agents from before the automatic rollback's mark wait on that alone.
	promotionRecorded bool
	// CanaryNodes are the records of the canaries, read with the group by
	// Read, and by ReadFor while auto-promotion waits on them.
	CanaryNodes []NodeState
	// CanarySeen is since when the reader has seen the canaries healthy
	// (update.auto_promote), filled by Store.Read and ReadFor.
	CanarySeen CanarySeen
	// canaryDown are the canaries Consul sees down, as readCanaries read
	// them for an agent's look.
	canaryDown map[string]DownReason
	// For is the node ReadFor read for, whose gate Gate evaluates; "" for
	// a read of the whole group (Read), judged as a group.
	For string
	// After is how far each group the desired spec names in update.after
	// is on its own desired SHA, read with the records when it names any.
	After []GroupProgress
	// Last is what update.last is judged on, read with the records when
	// the desired spec has it.
	Last         *LastState
	Problems     []string
	cancelledSHA map[string]bool
	// pausedSHA and failedSHA name every SHA with a pause record or a
	// failure record, readable or not: rollbackTarget passes them over.
	pausedSHA map[string]bool
	failedSHA map[string]bool
	// convergedSHA are the SHAs a commit found converged (converged/),
	// the only ones rollbackTarget goes back to.
	convergedSHA map[string]Converged
	// byKey is every pair read, for the records of a SHA other than the
	// desired one: the failure counter, the failures a failure counts on.
	byKey map[string]*api.KVPair
	k     Keys // the group's keys, to look a record up in byKey
}

// Read lists the group's tree once and decodes it, with the health of the
// checks its desired spec blocks on (update.block_on; not block_on_node,
// which each agent judges for its own node).
func (s *Store) Read(ctx context.Context, group string, q *api.QueryOptions) (*GroupState, error) {
	g, err := s.readTree(ctx, group, q)
	if err != nil {
		return nil, err
	}
	if k, err := s.Keys(group); err == nil {
		s.withCanaries(s.withRelease(g, k), k)
	}
	return s.withOrder(ctx, s.withHealth(ctx, g, false), ""), nil
}

func (s *Store) readTree(ctx context.Context, group string, q *api.QueryOptions) (*GroupState, error) {
	k, err := s.Keys(group)
	if err != nil {
		return nil, err
	}
	pairs, meta, err := s.list(withReadLimit(ctx, s.readLimit()), k.Root(), q)
	var tl *TooLargeError
	if errors.As(err, &tl) {
		return s.readSplit(ctx, k, group, q)
	}
	if err != nil {
		return nil, err
	}
	// A request with no token gets a listing filtered to what it may
	// read, and no word that it was: a group with no desired key may be
	// one the token may not read, which a read of the key tells.
	if !slices.ContainsFunc(pairs, func(p *api.KVPair) bool { return p.Key == k.Desired() }) {
		if err := s.probeDenied(ctx, k.Desired()); err != nil {
			return nil, err
		}
	}
	return Parse(k, group, pairs, meta.LastIndex), nil
}

// Parse builds a GroupState from the pairs of a group's tree.
func Parse(k Keys, group string, pairs api.KVPairs, index uint64) *GroupState {
	return parse(k, group, pairs, index, true)
}

// parse is Parse; holderKeys says pairs hold the slot's holder keys, which
// an agent's look does not read (ReadFor): without them no holder counts
// as live, and none is reported stale.
func parse(k Keys, group string, pairs api.KVPairs, index uint64, holderKeys bool) *GroupState {
	byKey := map[string]*api.KVPair{}
	g := &GroupState{Group: group, Index: index, cancelledSHA: map[string]bool{},
		pausedSHA: map[string]bool{}, failedSHA: map[string]bool{}, convergedSHA: map[string]Converged{}, byKey: byKey, k: k}
	for _, p := range pairs {
		byKey[p.Key] = p
		g.parsePair(k, p)
	}
	if p := byKey[k.Desired()]; p != nil {
		g.DesiredPair = p
		var d Desired
		if g.note(decode(p.Key, p.Value, &d)) {
			g.Desired = &d
		}
	}
	g.resolveDesired(k, byKey)
	if p := byKey[k.Membership()]; p != nil {
		g.MembershipIndex = p.ModifyIndex
	}
	sort.Slice(g.Nodes, func(i, j int) bool { return g.Nodes[i].Node < g.Nodes[j].Node })
	sort.Slice(g.Invalid, func(i, j int) bool { return g.Invalid[i].Node < g.Invalid[j].Node })
	sort.Slice(g.History, func(i, j int) bool { return g.History[i].CommittedAt.Before(g.History[j].CommittedAt) })
	g.Holders = lockstep.ParseHolders(k.Slot(), pairs)
	if g.Holders.Problem != "" {
		g.Problems = append(g.Problems, g.Holders.Problem)
	} else if msg := staleHolders(k, pairs, g.Holders); msg != "" && holderKeys {
		g.Problems = append(g.Problems, msg)
	}
	names := make([]string, 0, len(pairs))
	for _, p := range pairs {
		names = append(names, p.Key)
	}
	for _, msg := range []string{unexpectedSlotKeys(k, names), legacySlotKeys(k, names)} {
		if msg != "" {
			g.Problems = append(g.Problems, msg)
		}
	}
	return g
}

// InvalidNode is a record under nodes/ that does not decode or check.
type InvalidNode struct {
	Node  string // from its key, as written: it may be no valid name
	Error string // what is wrong with it, naming the key
}

// note records err as a problem and reports whether there was none.
func (g *GroupState) note(err error) bool {
	if err != nil {
		g.Problems = append(g.Problems, err.Error())
		return false
	}
	return true
}

func (g *GroupState) parsePair(k Keys, p *api.KVPair) {
	rel := strings.TrimPrefix(p.Key, k.Root())
	switch {
	case strings.HasPrefix(rel, "nodes/"):
		var n NodeState
		name := strings.TrimPrefix(rel, "nodes/")
		err := decode(p.Key, p.Value, &n)
		// A record under another node's key would count that node twice.
		if err == nil && n.Node != name {
			err = fmt.Errorf("%s: names node %q, not %q", p.Key, n.Node, name)
		}
		if err != nil {
			g.note(err)
			g.Invalid = append(g.Invalid, InvalidNode{Node: name, Error: err.Error()})
			return
		}
		g.Nodes = append(g.Nodes, n)
	case strings.HasPrefix(rel, "history/"):
		var h HistoryEntry
		if g.note(decode(p.Key, p.Value, &h)) {
			g.History = append(g.History, h)
		}
	case strings.HasPrefix(p.Key, k.Cancel("")):
		g.cancelledSHA[strings.TrimPrefix(p.Key, k.Cancel(""))] = true
	case strings.HasPrefix(p.Key, k.LegacyCancel("")):
		g.cancelledSHA[strings.TrimPrefix(p.Key, k.LegacyCancel(""))] = true
	case strings.HasPrefix(p.Key, k.LegacyOperatorPause("")):
		g.pausedSHA[strings.TrimPrefix(p.Key, k.LegacyOperatorPause(""))] = true
	case strings.HasPrefix(rel, "pause/"):
		g.pausedSHA[strings.TrimPrefix(rel, "pause/")] = true
	case strings.HasPrefix(rel, "converged/"):
		var c Converged
		err := decode(p.Key, p.Value, &c)
		if err == nil && c.SHA != strings.TrimPrefix(rel, "converged/") {
			err = fmt.Errorf("%s: names SHA %q", p.Key, c.SHA)
		}
		if g.note(err) {
			g.convergedSHA[c.SHA] = c
		}
	case strings.HasPrefix(rel, "failures/"):
		sha, _, _ := strings.Cut(strings.TrimPrefix(rel, "failures/"), "/")
		g.failedSHA[sha] = true
	}
}

// operatorPause decodes an operator's pause at p, nil for none: a pause
// counts even when its value is garbage (sha names the SHA a pause of one
// SHA was kept under).
func (g *GroupState) operatorPause(p *api.KVPair, sha string) *OperatorPause {
	if p == nil {
		return nil
	}
	var op OperatorPause
	if !g.note(decode(p.Key, p.Value, &op)) {
		op = OperatorPause{SHA: sha, Reason: "(unreadable pause record)"}
	}
	return &op
}

// resolveDesired fills the records that belong to the desired SHA.
func (g *GroupState) resolveDesired(k Keys, byKey map[string]*api.KVPair) {
	if g.Desired == nil {
		return
	}
	sha := g.Desired.SHA
	for i := range g.History {
		if g.History[i].SHA == sha {
			g.Spec = g.History[i].Decoded()
		}
	}
	if g.Spec == nil {
		g.Problems = append(g.Problems, "desired SHA "+ShortSHA(sha)+" has no valid spec in history")
	}
	// A CANCEL or a pause counts even when its value is garbage. The
	// placeholder goes in only then: a record without a reason is valid
	// (`rollagent cancel` without --reason writes one).
	if p := g.cancelPair(sha); p != nil {
		var c Cancel
		if !g.note(decode(p.Key, p.Value, &c)) {
			c = Cancel{SHA: sha, Reason: "(unreadable cancel record)"}
		}
		g.Cancel = &c
	}
	g.OperatorPause = g.operatorPause(byKey[k.OperatorPause()], "")
	if g.OperatorPause == nil {
		g.OperatorPause = g.operatorPause(byKey[k.LegacyOperatorPause(sha)], sha)
	}
	if p := byKey[k.Pause(sha)]; p != nil {
		var ps Pause
		if !g.note(decode(p.Key, p.Value, &ps)) {
			ps = Pause{SHA: sha, Reason: "(unreadable pause record)"}
		}
		g.Pause = &ps
	}
	g.Failures = g.failuresOf(k, sha, g.note)
	for _, r := range Rules {
		if rr, ok := r.(resolvingRule); ok {
			rr.resolve(g, k, sha)
		}
	}
}

// autoRollbackPromotion is the promotion an automatic rollback carries,
// nil when desired is none: a rollback returns to a known-good SHA and
// must not wait on a canary stage. Without it, the rollout back waits on
// the canaries the SHA's earlier commit chose (with auto_promote, for them
// to stay healthy canary_healthy_time while the failed canaries sit on
// the broken SHA), or stalls when that record names nodes gone since. An
// agent's token may write neither canaries/ nor promoted/ (only an
// operator chooses or promotes canaries), so the mark is in desired, which
// it writes for the rollback. Desired is writable by every agent's token,
// so the mark is believed only as far as the operator's records bear it
// out: the SHA converged on every node (converged/) after its latest canary
// stage began (canaries/, rewritten by each commit or rollback with
// canaries, so a SHA the operator committed again for canaries keeps that
// stage however it is rolled back to), and no pause or failure of it came
// since, as rollbackTarget requires. An operator's `rollagent rollback`
// writes a promotion record instead.
func (g *GroupState) autoRollbackPromotion(k Keys) *Promotion {
	d := g.Desired
	if !d.AutoRollback {
		return nil
	}
	conv := g.byKey[k.Converged(d.SHA)]
	if _, ok := g.convergedSHA[d.SHA]; !ok || conv == nil {
		return nil
	}
	if c := g.byKey[k.Canaries(d.SHA)]; c != nil && c.ModifyIndex >= conv.ModifyIndex {
		return nil // committed again for canaries since it converged
	}
	if g.troubledSince(k, d.SHA, conv.ModifyIndex) {
		return nil
	}
	return &Promotion{SHA: d.SHA, Reason: "failure_action=rollback goes back to a SHA that converged on every node: " + d.Reason,
		At: d.CommittedAt, By: AutoRollbackBy}
}

// AutoRollbackBy is who promotes an automatic rollback (a promotion no
// record holds: autoRollbackPromotion).
const AutoRollbackBy = "the automatic rollback"

// cancelPair is sha's CANCEL as read, where it is now or, from before an
// upgrade, where it was (Keys.LegacyCancel); nil when there is none.
func (g *GroupState) cancelPair(sha string) *api.KVPair {
	if p := g.byKey[g.k.Cancel(sha)]; p != nil {
		return p
	}
	return g.byKey[g.k.LegacyCancel(sha)]
}

// failuresOf decodes the failure records of sha, sorted by node; note is
// told of each record that does not decode, which is left out.
func (g *GroupState) failuresOf(k Keys, sha string, note func(error) bool) []Failure {
	var fs []Failure
	prefix := k.FailuresPrefix(sha)
	for key, p := range g.byKey {
		if strings.HasPrefix(key, prefix) {
			var f Failure
			if note(decode(p.Key, p.Value, &f)) {
				fs = append(fs, f)
			}
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].Node < fs[j].Node })
	return fs
}

// DesiredUnreadable reports whether the desired key exists but does not
// decode: someone else wrote it, and nothing may act on it.
func (g *GroupState) DesiredUnreadable() bool { return g.DesiredPair != nil && g.Desired == nil }

// Cancelled reports whether sha has a CANCEL record.
func (g *GroupState) Cancelled(sha string) bool { return g.cancelledSHA[sha] }
