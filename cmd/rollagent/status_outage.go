package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
)

// watchWait is how long one read of status --watch blocks for a change.
const watchWait = time.Minute

// readGroupWait reads group once it moves past index, or after wait, and
// which nodes Consul sees down or gone, bounded by timeout and, for a
// blocking read (index > 0), by wait and the up to wait/16 Consul adds to
// spread blocking queries out as well. An unbounded read would hang a
// watch or the exporter on a server that accepts the connection and never
// answers, with the last state shown as current.
func readGroupWait(ctx context.Context, st *coordinator.Store, group string, index uint64, wait, timeout time.Duration) (*coordinator.GroupState, error) {
	bound := timeout
	if index > 0 {
		bound += wait + wait/16
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	gs, err := st.Read(ctx, group, &api.QueryOptions{WaitIndex: index, WaitTime: wait})
	if err != nil {
		return nil, err
	}
	withUnavailable(ctx, st, gs)
	return gs, nil
}

// outageState is how long status --watch has not been able to read.
type outageState struct {
	err   error     // the last error, nil while reads succeed
	since time.Time // the first error of this outage
}

func (o *outageState) fail(err error, now time.Time) {
	if o.err == nil {
		o.since = now
	}
	o.err = err
}

// line is the table's outage line: an operator who looks at a watch
// during an incident must see that what is above is not current.
func (o outageState) line(now time.Time) string {
	return fmt.Sprintf("%s: no answer from Consul since %s (%s): %v (retrying)", now.Format(time.TimeOnly),
		o.since.Format(time.TimeOnly), now.Sub(o.since).Round(time.Second), o.err)
}

// outageJSON is the outage in status -o json --watch.
type outageJSON struct {
	Since   time.Time `json:"since"`
	Seconds float64   `json:"seconds"`
	Error   string    `json:"error"`
}

// printOutageJSON writes the last state read, or an empty one if none was,
// with the outage: a script reading a watch sees each failed try.
func (c *StatusCmd) printOutageJSON(out io.Writer, gs *coordinator.GroupState, o outageState, now time.Time) error {
	var s statusJSON
	if gs != nil {
		s = newStatusJSON(gs, c.options(), now)
	} else {
		s = newStatusJSON(&coordinator.GroupState{Group: c.Group}, c.options(), now)
		s.Gate = gateJSON{Reason: "unknown: no state read from Consul yet", PassedFence: []fencedJSON{}, BlockedBy: []blockJSON{}}
	}
	s.Outage = &outageJSON{Since: o.since, Seconds: now.Sub(o.since).Seconds(), Error: o.err.Error()}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}
