package fleetwatch

import (
	"context"
	"sync"

	"github.com/docker/docker/client"
	"github.com/rollagent/rollagent/internal/fleettest"
)

// Workload is one node's workload at a sample.
type Workload = fleettest.Workload

// Probe reads the workloads of group's nodes, keyed by node. A node it
// finds nothing of is absent from the map, and down.
type Probe func(ctx context.Context, group string, nodes []string) (map[string]Workload, error)

// Docker lists group's containers in one call: every node's at the same
// moment, so that two nodes down at once cannot fall between two reads.
func Docker(cli *client.Client) Probe {
	return func(ctx context.Context, group string, _ []string) (map[string]Workload, error) {
		return fleettest.ListWorkloadsContext(ctx, cli, group)
	}
}

// EachNode is a Probe that reads each node on its own, all at once: an
// exec host, whose workload is judged by running its health hook.
func EachNode(read func(ctx context.Context, node string) Workload) Probe {
	return func(ctx context.Context, _ string, nodes []string) (map[string]Workload, error) {
		ws := make([]Workload, len(nodes))
		var wg sync.WaitGroup
		for i, nd := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ws[i] = read(ctx, nd)
			}()
		}
		wg.Wait()
		out := make(map[string]Workload, len(nodes))
		for i, nd := range nodes {
			out[nd] = ws[i]
		}
		return out, nil
	}
}

// Judge says a node's workload is down.
type Judge func(Workload) bool

// Unhealthy is the guarantee's own word for down: the container under the
// node's managed name absent, not running, or running without Docker's
// health status "healthy" ("starting" and "unhealthy" are down, whatever
// it was before). An exec host's probe sets Healthy from its health hook.
func Unhealthy(w Workload) bool { return !w.Healthy }

// Unserved is down for start-first: no container of the node runs
// healthy, under either name. The old one serves as <name>-prev until the
// new one is healthy.
func Unserved(w Workload) bool { return !w.Serving }
