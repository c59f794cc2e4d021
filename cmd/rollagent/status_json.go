package main

import (
	"sort"
	"time"

	"github.com/rollagent/rollagent/coordinator"
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
	Waiting  int                     `json:"waiting_for_slot"`
	Failures []coordinator.Failure   `json:"failures"`
	Problems []string                `json:"problems"`
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

func newStatusJSON(gs *coordinator.GroupState, now time.Time) statusJSON {
	v, p := gs.Gate(), gs.Progress()
	s := statusJSON{Schema: statusSchema, Group: gs.Group, At: now, Desired: gs.Desired,
		Gate: gateJSON{Open: v.Open, Reason: v.Reason, SHA: v.SHA, MaxParallel: v.Limit},
		Progress: progressJSON{Total: p.Total, Converged: p.Converged, Replacing: p.Replacing,
			Waiting: p.Waiting, Failed: p.Failed, Other: p.Other, Done: p.Done},
		Nodes: nonNil(gs.Nodes), Holders: []holderJSON{}, Failures: nonNil(gs.Failures),
		Problems: nonNil(gs.Problems)}
	if e, ok := estimate(gs, v, p, now); ok {
		s.Progress.ETA = &etaJSON{Seconds: e.left.Seconds(), PerNodeSeconds: e.perNode.Seconds(), Basis: e.basis}
	}
	if gs.Holders != nil {
		for _, h := range gs.Holders.Holding {
			s.Holders = append(s.Holders, holderJSON{Name: h.Name, Since: h.Since})
		}
		sort.Slice(s.Holders, func(i, j int) bool { return s.Holders[i].Name < s.Holders[j].Name })
		s.Waiting = len(gs.Holders.Waiting)
	}
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
