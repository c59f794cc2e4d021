package agent

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"
)

// DefaultDownAfter is how long the readings of a workload whose runtime
// keeps no health history of its own (the exec health hook) must fail in a
// row before the workload is taken for down: the first and the latest
// failing reading at least this far apart, so two runs of the workload
// check (every 10 s) at least. One failed probe is not a node down.
const DefaultDownAfter = 10 * time.Second

// Health is what one reading says of a workload.
type Health int

const (
	// HealthUp: healthy now.
	HealthUp Health = iota
	// HealthFailing: not healthy now, and no sustained signal yet that it
	// is down: a container Docker still counts as starting, a health hook
	// that has failed for less than DownAfter. Its check says warning:
	// the node counts against max_parallel (Store.Down), as it is not
	// healthy by the runtime's own status, but it does not jump the line.
	HealthFailing
	// HealthDown: down by a sustained signal. Its check says critical, and
	// the node counts against max_parallel (Store.Down); behind, it claims
	// its slot ahead of the line (PlanClaimDown).
	HealthDown
)

// HealthJudge is a Runtime that tells a workload that is down from one
// that is not healthy yet, from a health history of its own (Docker's
// health status, which counts its probes' retries). The agent applies
// DownAfter to the readings of a runtime that is not one.
type HealthJudge interface {
	Health(ctx context.Context) (Health, string)
}

// downHistory judges a run of readings by time: failing until the first
// and the latest failing reading in a row are after apart, then down.
type downHistory struct {
	mu    sync.Mutex
	since time.Time // the first failing reading of the run; zero after a passing one
}

func (d *downHistory) judge(ok bool, now time.Time, after time.Duration) Health {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ok {
		d.since = time.Time{}
		return HealthUp
	}
	if d.since.IsZero() {
		d.since = now
	}
	if now.Sub(d.since) >= after {
		return HealthDown
	}
	return HealthFailing
}

// timedJudge applies DownAfter to a runtime that keeps no health history.
type timedJudge struct {
	rt    healthReader
	after time.Duration
	hist  downHistory
}

func (j *timedJudge) Health(ctx context.Context) (Health, string) {
	ok, why := j.rt.Healthy(ctx)
	if !ok && errors.Is(ctx.Err(), context.Canceled) {
		return HealthFailing, why // cut off by its caller: no reading (a deadline is one)
	}
	return j.hist.judge(ok, time.Now(), j.after), why
}

// judgeOf is rt's own HealthJudge, or one that applies after (or
// DefaultDownAfter) to its readings.
func judgeOf(rt healthReader, after time.Duration) HealthJudge {
	if j, ok := rt.(HealthJudge); ok {
		return j
	}
	return &timedJudge{rt: rt, after: cmp.Or(after, DefaultDownAfter)}
}
