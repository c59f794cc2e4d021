package agent

import (
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/lockstep"
)

// publisher is what this node shows of itself, in three parts, each the
// only owner of what it holds: its record in KV (nodeRecord, with the stop
// mark), its Consul service with the session's check, and the alive
// check's instance (catalog), and the workload's health on the service (workloadHealth).
type publisher struct {
	*nodeRecord
	*catalog
	*workloadHealth
}

// newPublisher wires the three parts of what this node shows of itself.
func newPublisher(cfg Config, log hclog.Logger, judge HealthJudge) *publisher {
	h := &workloadHealth{store: cfg.Store, group: cfg.Group, node: cfg.Node, log: log, judge: judge, downChanged: make(chan struct{}, 1)}
	s := &catalog{store: cfg.Store, group: cfg.Group, node: cfg.Node, log: log, health: h,
		healthURL: cfg.HealthURL, aliveURL: cfg.AliveURL, aliveEvery: cfg.SessionTTL / 3,
		noMirror: cfg.noStateMirror, changed: make(chan struct{}, 1)}
	s.aliveID = lockstep.NewCheckID(s.serviceID() + ":alive")
	r := &nodeRecord{store: cfg.Store, group: cfg.Group, node: cfg.Node, log: log, written: s.signal}
	s.record = r
	return &publisher{nodeRecord: r, catalog: s, workloadHealth: h}
}
