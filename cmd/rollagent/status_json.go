package main

import (
	"sort"
	"time"

	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/lockstep"
)

// statusSchema is bumped on any change that could break a script reading
// `status -o json`; fields are only ever added within one schema.
const statusSchema = 1

// statusJSON is the stable schema of `status -o json`, documented in
// docs/status-json.md. It has its own types rather than coordinator's so
// that an internal rename cannot change what scripts parse.
type statusJSON struct {
	Schema   int                     `json:"schema"`
	Group    string                  `json:"group"`
	At       time.Time               `json:"at"`
	Desired  *coordinator.Desired    `json:"desired"`
	Gate     gateJSON                `json:"gate"`
	Progress progressJSON            `json:"progress"`
	Nodes    []coordinator.NodeState `json:"nodes"`
	Holders  []holderJSON            `json:"holders"`
	Orphans  []claimJSON             `json:"orphaned_claims"`
	Down     []string                `json:"unavailable"`
	Waiting  int                     `json:"waiting_for_slot"`
	Failures []coordinator.Failure   `json:"failures"`
	Problems []string                `json:"problems"`
	Budget   budgetJSON              `json:"slot_budget"`
	Stall    *stallJSON              `json:"stall"`            // null unless the group is stalled
	Outage   *outageJSON             `json:"outage,omitempty"` // status --watch only, while Consul does not answer
}

type gateJSON struct {
	Open        bool   `json:"open"`
	Reason      string `json:"reason"`
	SHA         string `json:"sha,omitempty"`
	MaxParallel int    `json:"max_parallel"`
}

type progressJSON struct {
	Total     int      `json:"total"`
	Converged int      `json:"converged"`
	Replacing int      `json:"replacing"`
	Waiting   int      `json:"waiting"`
	Failed    int      `json:"failed"`
	Other     int      `json:"other"`
	Done      bool     `json:"done"`
	ETA       *etaJSON `json:"eta"` // null while there is no pace to go by
}

type etaJSON struct {
	Seconds        float64 `json:"seconds"`
	PerNodeSeconds float64 `json:"per_node_seconds"`
	Basis          int     `json:"basis"` // nodes converged since the commit
}

type holderJSON struct {
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
}

// claimJSON is a node's claim on a slot whose process is gone: the node
// still counts against max_parallel until it is back or Until passes.
type claimJSON struct {
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Counts is false once Until passed, or Lost: then it no longer holds
	// the rollout back.
	Counts bool `json:"counts"`
	// Lost says a waiter recorded the node failed as lost.
	Lost bool `json:"lost"`
}

func newStatusJSON(gs *coordinator.GroupState, now time.Time) statusJSON {
	v, p := gs.Gate(), gs.Progress()
	s := statusJSON{Schema: statusSchema, Group: gs.Group, At: now, Desired: gs.Desired,
		Gate: gateJSON{Open: v.Open, Reason: v.Reason, SHA: v.SHA, MaxParallel: v.Limit},
		Progress: progressJSON{Total: p.Total, Converged: p.Converged, Replacing: p.Replacing,
			Waiting: p.Waiting, Failed: p.Failed, Other: p.Other, Done: p.Done},
		Nodes: nonNil(gs.Nodes), Holders: []holderJSON{}, Orphans: []claimJSON{}, Down: nonNil(gs.Unavailable), Failures: nonNil(gs.Failures),
		Problems: nonNil(gs.Problems)}
	if e, ok := estimate(gs, v, p, now); ok {
		s.Progress.ETA = &etaJSON{Seconds: e.left.Seconds(), PerNodeSeconds: e.perNode.Seconds(), Basis: e.basis}
	}
	if gs.Holders != nil {
		for _, h := range gs.Holders.Holding {
			s.Holders = append(s.Holders, holderJSON{Name: h.Name, Since: h.Since})
		}
		sort.Slice(s.Holders, func(i, j int) bool { return s.Holders[i].Name < s.Holders[j].Name })
		s.Orphans = orphans(gs.Holders, now)
		s.Waiting = len(gs.Holders.Waiting)
	}
	diagnose(&s, gs, v, now)
	return s
}

// nonNil makes an empty list encode as [] rather than null, so scripts can
// iterate without a guard.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// orphans lists the claims whose session is gone, by node name.
func orphans(h *lockstep.Holders, now time.Time) []claimJSON {
	out := []claimJSON{}
	counted := map[string]bool{}
	for _, n := range h.Counted(now) {
		counted[n] = true
	}
	for name, c := range h.Claims {
		if !h.Live(c.Session) {
			out = append(out, claimJSON{Name: name, Since: c.Since, Until: c.Until, Counts: counted[name], Lost: c.Lost})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
