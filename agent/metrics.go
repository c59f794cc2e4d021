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
