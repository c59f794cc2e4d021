// Package coordinator owns a group's state in Consul KV and the policy that
// every node evaluates over it: is the gate open for a SHA (desired, not
// cancelled, not paused by failures), how many may replace at once, what a
// failure does, and whether a rollout is done.
//
// It is not a leader. Its decisions are pure functions of the KV state, so
// every agent and `rollagent status` reach the same answer from the same
// data, and nothing stalls when any one process dies.
//
// The KV layout is documented in docs/kv-layout.md and defined in keys.go.
//
// A Store is an agent's one way to Consul: its reads of the group, its
// blocking wait on desired (WaitDesired, ReadForAt), its lockstep session
// and semaphore, and its node's service (local.go). No Consul client
// leaves it.
package coordinator
