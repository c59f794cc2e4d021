package agent

import "time"

// Metrics receives what the agent measures. The Prometheus implementation
// lives with the CLI; tests and embedders may pass their own.
type Metrics interface {
	Replacement(result string) // "success", "failed", "aborted", "kept", "released"
	SlotWait(d time.Duration)
	SlotHold(d time.Duration)
	Converged(ok bool)
	ConsulError()
}

type nopMetrics struct{}

func (nopMetrics) Replacement(string)     {}
func (nopMetrics) SlotWait(time.Duration) {}
func (nopMetrics) SlotHold(time.Duration) {}
func (nopMetrics) Converged(bool)         {}
func (nopMetrics) ConsulError()           {}

// FenceGapMetrics is implemented by a Metrics that also takes the
// fence-to-step gap of each destructive step: from its fence's transaction
// returning OK to the runtime being let take the step. It is a separate
// interface so that a Metrics written before it still works.
type FenceGapMetrics interface {
	FenceGap(d time.Duration)
}
