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

// readWait reads the group once it moves past index, or after watchWait,
// and which nodes Consul sees down, all within watchWait, the up to
// watchWait/16 Consul adds to spread blocking queries out, and --timeout.
// An unbounded read would hang the watch on a server that accepts the
// connection and never answers, with the last state shown as current.
func (c *StatusCmd) readWait(ctx context.Context, st *coordinator.Store, index uint64) (*coordinator.GroupState, error) {
	ctx, cancel := context.WithTimeout(ctx, watchWait+watchWait/16+c.timeout)
	defer cancel()
	gs, err := st.Read(ctx, c.Group, &api.QueryOptions{WaitIndex: index, WaitTime: watchWait})
	if err != nil || gs.Index == index {
		return gs, err
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
		s.Gate = gateJSON{Reason: "unknown: no state read from Consul yet"}
	}
	s.Outage = &outageJSON{Since: o.since, Seconds: now.Sub(o.since).Seconds(), Error: o.err.Error()}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}
