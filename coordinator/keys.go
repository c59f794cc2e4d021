package coordinator

import (
	"fmt"
	"strings"

	"github.com/rollagent/rollagent/hashspec"
)

// DefaultPrefix is where rollagent keeps all of its state in Consul KV.
const DefaultPrefix = "rollagent/"

// Keys names every KV key of one group. See docs/kv-layout.md.
type Keys struct {
	root string // <prefix>groups/<group>/
}

// NewKeys returns the keys of group under prefix, after checking the group
// name, so that no key can escape its group's tree.
func NewKeys(prefix, group string) (Keys, error) {
	if err := hashspec.ValidateName(group); err != nil {
		return Keys{}, fmt.Errorf("group: %w", err) // the error quotes the name, shortened
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Keys{root: strings.TrimSuffix(prefix, "/") + "/groups/" + group + "/"}, nil
}

// Root is the group's tree, ending in "/".
func (k Keys) Root() string { return k.root }

// Desired holds the desired SHA record. Its Flags are a gate generation
// counter bumped by every cancel, pause and resume, which wakes waiters.
func (k Keys) Desired() string { return k.root + "desired" }

// History holds the spec committed under sha.
func (k Keys) History(sha string) string { return k.root + "history/" + sha }

// HistoryPrefix lists every committed spec.
func (k Keys) HistoryPrefix() string { return k.root + "history/" }

// BrakesPrefix holds the brakes only an operator may set or release: the
// agent's policy reads it and writes nothing under it, so a node's token
// can neither lift a CANCEL or an operator's pause nor forge one.
func (k Keys) BrakesPrefix() string { return k.root + "brakes/" }

// Cancel is the CANCEL record for sha; while it exists nothing moves for sha.
func (k Keys) Cancel(sha string) string { return k.BrakesPrefix() + "cancel/" + sha }

// LegacyCancel is where a CANCEL was kept before brakes/, under a prefix
// that agents' policies of that time could write. One left there from
// before an upgrade still closes the gate; `rollagent cancel` writes a copy
// there for agents from before brakes/.
func (k Keys) LegacyCancel(sha string) string { return k.root + "cancel/" + sha }

// OperatorPause is an operator's pause of the group (`rollagent pause`),
// lifted only by `rollagent resume`: it holds every SHA, so a new commit
// does not lift it behind the operator's back.
func (k Keys) OperatorPause() string { return k.BrakesPrefix() + "paused" }

// LegacyOperatorPause is where an operator's pause of one SHA was kept
// before the pause held the group. One left there still closes the gate
// while sha is desired, until `rollagent resume` (or a new commit of sha)
// deletes it.
func (k Keys) LegacyOperatorPause(sha string) string { return k.BrakesPrefix() + "pause/" + sha }

// Pause is written by the agent whose failure of sha reached max_failures
// under failure_action=pause. Agents share it, as they share failures/.
func (k Keys) Pause(sha string) string { return k.root + "pause/" + sha }

// Failure records one node's failed replacement to sha.
func (k Keys) Failure(sha, node string) string { return k.root + "failures/" + sha + "/" + node }

// FailuresPrefix lists the failures for sha.
func (k Keys) FailuresPrefix(sha string) string { return k.root + "failures/" + sha + "/" }

// Deadline records that the progress deadline of a commit of sha passed
// (update.progress_deadline) and failure_action applied: the agent whose
// clock passed it first creates it, once per commit. Agents share it, as
// they share failures/; it is not a brake.
func (k Keys) Deadline(sha string) string { return k.root + "deadline/" + sha }

// Converged records that sha converged: every node that counted ran it,
// converged, behind an open gate, when a commit moved desired off it.
func (k Keys) Converged(sha string) string { return k.root + "converged/" + sha }

// FailCount is sha's failure counter, which every failure write CASes so
// that concurrent failures are counted one after another. It lives outside
// failures/ so that the listing of failures/<sha>/ holds node records only.
func (k Keys) FailCount(sha string) string { return k.root + "failcount/" + sha }

// Canaries names the nodes that take sha first (update.canary), written
// by the commit that makes sha desired. Only commits write it: an agent's
// token may read it, not choose the canaries.
func (k Keys) Canaries(sha string) string { return k.root + "canaries/" + sha }

// Promoted is an operator's promotion of sha's rollout past its canaries
// (`rollagent promote`); a commit of sha deletes it, so each rollout of a
// SHA is promoted anew. Agents may read it, not write it: no node's token
// can promote.
func (k Keys) Promoted(sha string) string { return k.root + "promoted/" + sha }

// Node holds one node's published state.
func (k Keys) Node(node string) string { return k.root + "nodes/" + node }

// NodesPrefix lists every node's state.
func (k Keys) NodesPrefix() string { return k.root + "nodes/" }

// Stopped indexes node's stop mark: whoever writes the mark into the
// node's record (NodeState.Stopped, with StopIndex) sets it in the same
// transaction, so that Down finds every stopped node without reading
// every record. It may outlive the mark (an agent back deletes it after
// its first record without the mark, best effort): readers confirm it
// against the record. Its value is the time of the stop, for people.
func (k Keys) Stopped(node string) string { return k.StoppedPrefix() + node }

// StoppedPrefix lists the stop index.
func (k Keys) StoppedPrefix() string { return k.root + "stopped/" }

// DownCheck is the latest full read of the records by Down (a
// DownCheckMark): when, and whether every record it saw keeps the stop
// index. Shared by every reader of the group; an agent's token writes it.
func (k Keys) DownCheck() string { return k.root + "downcheck" }

// Membership changes with every removal of a node's record (`node rm`):
// a grant made under a percentage of max_parallel checks its index, so no
// grant uses a K computed from a group larger than the one it is made in.
// Its value is the latest removal (a RemovedMark). Agents may read it.
func (k Keys) Membership() string { return k.root + "membership" }

// Removed is the operator's mark that node was removed from the group
// (`node rm`): without a record of its own, its service instance in the
// catalog no longer counts it down. Agents may read it, not write it.
func (k Keys) Removed(node string) string { return k.root + "removed/" + node }

// RemovedPrefix lists the removal marks.
func (k Keys) RemovedPrefix() string { return k.root + "removed/" }

// EventsPrefix lists the group's event log, every writer's part of it.
func (k Keys) EventsPrefix() string { return k.root + "events/" }

// OperatorEvents is the operators' part of the log (the CLI's commits,
// rollbacks, cancels, pauses, resumes, node removals), which only an
// operator's token may write.
func (k Keys) OperatorEvents() string { return k.EventsPrefix() + "operator/" }

// NodeEvents is node's part of the log (its agent's failures, and the
// pause or rollback one of them made), which only that node's token and
// an operator's may write. Each writer prunes its own part alone.
func (k Keys) NodeEvents(node string) string { return k.NodeEventsPrefix() + node + "/" }

// NodeEventsPrefix lists every node's part of the log.
func (k Keys) NodeEventsPrefix() string { return k.EventsPrefix() + "node/" }

// Slot is the lockstep semaphore prefix.
func (k Keys) Slot() string { return k.root + "slot/" }

// Closing lists the keys whose existence closes the gate for sha and
// that Consul checks in every grant and fence: those agents write. Consul
// takes a check that a key does not exist for a write of it, so this
// cannot list the brakes, which agents may not write; Brakes does. Both
// come from the gate's KeyRules.
func (k Keys) Closing(sha string) []string { return closingKeys(k, sha, false) }

// Brakes lists the operator's keys whose existence closes the gate for sha.
// A grant or fence checks them through desired instead: every writer of one
// (cancel, pause, resume, commit) moves desired in the same transaction,
// and a grant or fence checks desired at the index it decided on.
func (k Keys) Brakes(sha string) []string { return closingKeys(k, sha, true) }
