// Package fleetwatch is the fleet invariant monitor the tests share: it
// samples each group's workloads from Docker's own state (or, on an exec
// host, its health hook's own check) and the group's state from Consul's
// own KV, never from what the agents report about themselves, and counts
// every node of a group, a dead one too. Tests plug their judgements in:
// a bound on the worst sample (at most K down, at most M down in one zone,
// K holding), or a check of each sample (the nemesis' invariants).
package fleetwatch
