package agent_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/rollagent/rollagent/agent"
	"github.com/rollagent/rollagent/internal/dockertest"
	"github.com/rollagent/rollagent/internal/testkit/groupkit"
)

// startDocker starts node's agent with the Docker runtime, as start does,
// and returns its process.
func (f *fleet) startDocker(node string) *proc {
	return f.startArgs(node, "--label="+dockertest.Label+"="+dockertest.RunID())
}

// midReplacement returns the node, if any, whose old container is set aside
// under <name>-prev: one in the middle of a replacement.
func (f *fleet) midReplacement() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	args := filters.NewArgs(filters.Arg("label", agent.LabelGroup+"="+f.group), filters.Arg("label", dockertest.Label+"="+dockertest.RunID()))
	list, err := f.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return ""
	}
	for _, c := range list {
		n := c.Labels[agent.LabelNode]
		for _, name := range c.Names {
			if name == "/rollagent-"+f.group+"-"+n+"-prev" {
				return n
			}
		}
	}
	return ""
}

// holds says whether a slot holder is named node.
func (f *fleet) holds(node string) bool {
	_, ok := groupkit.Holding(f.holders(), node)
	return ok
}

// SIGTERM to the agent in the middle of a stop-first replacement: it
// finishes (or undoes) the step, releases the slot and exits within
// healthy_deadline and a margin, leaving one healthy container on its
// node; the rollout goes on, and completes once the agent is back.
func TestSIGTERMMidReplacementFinishesTheStep(t *testing.T) {
	f := newFleet(t, "web")
	ns := nodes(3)
	procs := map[string]*proc{}
	for _, n := range ns {
		procs[n] = f.startDocker(n)
	}
	v1 := f.commit(f.spec(f.image("v1", nil), 3, "pause", 1))
	f.waitFor(90*time.Second, "first deploy of v1", func() bool { return f.converged(ns, v1) })
	spec := f.spec(f.image("v2", nil), 1, "pause", 1)
	v2 := f.commit(spec)
	victim := ""
	f.waitFor(60*time.Second, "a node in the middle of its replacement", func() bool {
		victim = f.midReplacement()
		return victim != ""
	})
	termed := time.Now()
	f.signal(victim, syscall.SIGTERM)
	limit := spec.Update.HealthyDeadline.Std() + 15*time.Second
	select {
	case <-procs[victim].done:
	case <-time.After(limit):
		t.Fatalf("agent %s still running %s after SIGTERM (healthy_deadline %s)", victim, limit, spec.Update.HealthyDeadline)
	}
	if err := procs[victim].err; err != nil {
		t.Errorf("agent %s exited with %v after SIGTERM, want status 0", victim, err)
	}
	t.Logf("agent %s exited %s after SIGTERM mid-replacement", victim, time.Since(termed).Round(100*time.Millisecond))
	f.checkLeftAlone(victim, v1, v2)
	f.startDocker(victim)
	f.waitFor(2*time.Minute, "rollout to v2 after the restart", func() bool { return f.converged(ns, v2) })
}

// checkLeftAlone checks what an agent stopped mid-replacement left: one
// container on its node, of the new or the old SHA, that is (or soon is)
// healthy, no slot held in its name, and no service instance of its own.
func (f *fleet) checkLeftAlone(victim, old, sha string) {
	t := f.t
	t.Helper()
	w := f.workloads()[victim]
	if len(w.IDs) != 1 || (w.SHAs[0] != sha && w.SHAs[0] != old) {
		t.Fatalf("node %s has containers of %.12q after its agent exited, want exactly one, of the new or old SHA", victim, w.SHAs)
	}
	outcome := map[bool]string{true: "finished: the new container runs", false: "undone: the old container was restored"}[w.SHAs[0] == sha]
	t.Logf("the step was %s", outcome)
	f.waitFor(15*time.Second, "the node's one container to be healthy", func() bool {
		w := f.workloads()[victim]
		return len(w.IDs) == 1 && w.Healthy
	})
	f.waitFor(5*time.Second, "the slot to be free of "+victim, func() bool { return !f.holds(victim) })
	f.waitFor(5*time.Second, "the service instance of "+victim+" to be gone", func() bool {
		byNode, err := serviceEntries(f)
		return err == nil && byNode[victim] == nil
	})
}
