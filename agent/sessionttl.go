package agent

import (
	"fmt"
	"time"
)

// The range of Config.SessionTTL (rollagent run --session-ttl).
//
// At the low end, the Consul agent runs the liveness check every third of
// the TTL and never more often than once a second (its checks'
// MinInterval): below 3s the check would run less often than the TTL
// assumes, and the margins that hang on the TTL (a fence retries Consul for
// two thirds of it, a session is deemed lost after five sixths of it
// without a pass) would shrink below a second, so one slow answer would
// cost a holder its slot.
//
// At the high end, a dead agent's session ends, and its node is seen down
// and counted against max_parallel, about one TTL after it dies; a
// partitioned holder keeps its node down for up to two thirds of one
// before undoing its step. Past 30s, the TTL of the workload check that
// an agent without a liveness check passes, a dead node would go unseen
// longer than anything else rollagent waits for, and an hour-long TTL
// would let a dead holder's node stay uncounted for that hour.
const (
	MinSessionTTL = 3 * time.Second
	MaxSessionTTL = 30 * time.Second
)

// CheckSessionTTL says whether d is within [MinSessionTTL, MaxSessionTTL].
func CheckSessionTTL(d time.Duration) error {
	if d < MinSessionTTL || d > MaxSessionTTL {
		return fmt.Errorf("session TTL %s: must be between %s and %s", d, MinSessionTTL, MaxSessionTTL)
	}
	return nil
}
