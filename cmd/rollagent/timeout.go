package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alecthomas/kong"
)

// DefaultTimeout is the default of --timeout.
const DefaultTimeout = 30 * time.Second

// selfBounded is a command that bounds its own calls to Consul rather than
// being given one deadline: `run`, whose retries go on for as long as it
// runs, and `status --watch`, whose reads each wait up to a minute.
type selfBounded interface{ boundsItself() bool }

func (*RunCmd) boundsItself() bool { return true }

func (c *StatusCmd) boundsItself() bool { return c.Watch }

// checkTimeout refuses a --timeout that would end every call at once, or
// none: a negative duration is a typo, not a wish to wait forever.
func (g *Globals) checkTimeout() error {
	if g.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: must be positive (e.g. 30s); it bounds every call of a command to Consul", g.Timeout)
	}
	return nil
}

// commandContext gives the selected command ctx with the --timeout
// deadline, unless the command bounds its calls itself.
func commandContext(ctx context.Context, kctx *kong.Context, g *Globals) (context.Context, context.CancelFunc) {
	if n := kctx.Selected(); n != nil && n.Target.CanAddr() {
		if sb, ok := n.Target.Addr().Interface().(selfBounded); ok && sb.boundsItself() {
			return context.WithCancel(ctx)
		}
	}
	return context.WithTimeout(ctx, g.Timeout)
}

// explainDeadline says, of an error that the --timeout deadline caused,
// where rollagent was waiting and for how long, and how to wait longer. A
// registry's error says so itself: Consul was not what was waited for.
func explainDeadline(cctx, parent context.Context, g *Globals, err error) error {
	if err == nil || parent.Err() != nil || !errors.Is(cctx.Err(), context.DeadlineExceeded) || errors.Is(err, errRegistry) {
		return err
	}
	return fmt.Errorf("no answer from Consul at %s within --timeout=%s (ROLLAGENT_TIMEOUT): %w", g.address(), g.Timeout, err)
}

// address is where the command's Consul client connects, as it was built.
func (g *Globals) address() string {
	if g.addr == "" {
		return "(no client built)"
	}
	return g.addr
}
