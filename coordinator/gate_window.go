package coordinator

import (
	"fmt"
	"strings"
	"time"
)

// GateOutsideWindow: the desired spec has maintenance windows and none is
// open.
const GateOutsideWindow GateState = "outside_window"

// windowRule closes the gate to new grants outside every maintenance
// window of the desired spec (update.window). Consul cannot check a
// clock, so each agent evaluates it on its own clock right before it asks
// for a grant, and looks again when a window opens or closes (Verdict.Recheck).
// It is a hold: a node that holds its slot finishes its step.
type windowRule struct{}

func (windowRule) State() GateState { return GateOutsideWindow }

func (windowRule) Close(in GateInput) (Closed, bool) {
	st := in.Group.Spec.Update.WindowAt(in.Now)
	if st.Open {
		return Closed{Recheck: st.Until}, false
	}
	reason := "outside the maintenance window; none opens within a week"
	if !st.Next.IsZero() {
		w := st.NextWindow
		zone := w.TimeZone
		if zone == "" {
			zone = "UTC"
		}
		loc, err := time.LoadLocation(zone)
		if err != nil {
			loc = time.UTC
		}
		// No "in 3h12m" here: a node's record keeps the reason, and would
		// be rewritten at every look. Verdict.Until says it (Verdict.Wait).
		reason = fmt.Sprintf("outside the maintenance window; the next opens %s %s",
			st.Next.In(loc).Format("Mon 15:04"), zone)
	}
	return Closed{Reason: reason, Opens: "the next maintenance window opens the gate", Hold: true, Recheck: st.Next,
		BeforeStep: true}, true
}

// RoundWait shows a wait to the minute ("3h12m", "45m"), or to the
// second under a minute.
func RoundWait(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	s := strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
