package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/consultest"
	"github.com/rollagent/rollagent/internal/dockertest"
)

// consulOutage is how long Consul stays down: ten session TTLs, and longer
// than the agents' longest retry, so that every agent sees it.
const consulOutage = 30 * time.Second

// Consul goes down for 30s while one node is between setting its old
// container aside and starting its new one, and the others wait for the
// slot. What the design promises (README, Guarantees): no destructive step
// without a fence, and a fence cannot pass while Consul is down; the step
// already under way (stopping the old container) runs to its end; the
// holder, unable to fence its next step, touches nothing more: an undo is
// a destructive step too, behind the gate, which no fence can check while
// Consul is away (issue 25), and its node keeps counting under its claim.
// So while Consul is down: the waiting nodes' containers see no event at
// all, and the holder's node neither sees its new container created nor
// its old one started again. When Consul returns, the holder undoes or
// goes on under its slot, and the rollout completes, with nothing
// recorded against the release.
func TestOutageConsulDownMidReplacement(t *testing.T) {
	srv := consultest.New(t, consultest.Options{Persistent: true})
	f := newFleetOn(t, "consul", srv, dockertest.Client(t))
	ns := nodes(3)
	v1 := deploy(t, f, ns)
	ev := f.recordEvents()
	cen := f.census(ns, true)
	v2 := f.commit(f.spec(f.image("v2", nil), 1, "pause", 1))
	aside := ev.wait(t, 60*time.Second, 0, "a node to set its old container aside", func(e dockerEvent) bool {
		return e.action == "rename" && e.sha == v1 && e.aside()
	})
	victim := aside.node
	// Freeze the holder right there, before it can reach its next fence,
	// take Consul down, and let the holder go on: the outage starts at this
	// exact step, however fast the machine is.
	f.pauseAgent(victim, syscall.SIGSTOP)
	srv.Kill()
	mark := ev.len()
	f.pauseAgent(victim, syscall.SIGCONT)
	down := time.Now()
	t.Logf("consul down while %s is mid-replacement (old container set aside at %s)", victim, aside.at.Format("15:04:05.000"))
	f.watchOutage(consulOutage, victim, v1)
	up := time.Now() // fences may pass again from here on
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitReady(consultest.StartTimeout); err != nil {
		t.Fatal(err)
	}
	var during []dockerEvent
	for _, e := range ev.since(mark) {
		if e.at.Before(up) {
			during = append(during, e)
		}
	}
	t.Logf("consul back after %s; %d container events while it was down", time.Since(down).Round(100*time.Millisecond), len(during))
	checkOutageEvents(t, during, victim, v1, v2)
	back := time.Now()
	f.waitFor(2*time.Minute, "rollout to v2 after consul returned", func() bool { return f.converged(ns, v2) })
	t.Logf("rollout completed %s after consul returned", time.Since(back).Round(100*time.Millisecond))
	cen.finish(t, 1)
	f.checkKV(v2, 2)
	f.logRetries(ns, "cannot read group state")
}

// watchOutage watches the fleet for d, the length of the outage: the
// waiting nodes keep serving from the same containers throughout, and the
// holder's node is left as its step was cut off, its old container set
// aside and nothing started: an undo is a destructive step, and no fence
// can let one through while Consul is out of reach (issue 25). The node's
// claim keeps it counted against max_parallel meanwhile.
func (f *fleet) watchOutage(d time.Duration, victim, old string) {
	f.t.Helper()
	before := f.workloads()
	for start := time.Now(); time.Since(start) < d; time.Sleep(250 * time.Millisecond) {
		for n, w := range f.workloads() {
			if n != victim && (!w.Healthy || !slices.Equal(w.IDs, before[n].IDs)) {
				f.t.Fatalf("waiting node %s changed while Consul was down: %+v, was %+v", n, w, before[n])
			}
		}
	}
	if w := f.workloads()[victim]; len(w.IDs) != 1 || w.SHAs[0] != old || w.Managed != "" || len(w.Running) != 0 {
		f.t.Fatalf("%s is not left with its old container set aside and stopped after %s without Consul: %+v", victim, d, w)
	}
}

// checkOutageEvents checks what happened to containers while Consul was
// down: nothing on the waiting nodes; on the holder's node, the end of the
// stop already under way, but no new container and no undo.
func checkOutageEvents(t *testing.T, during []dockerEvent, victim, old, sha string) {
	t.Helper()
	for _, e := range during {
		switch {
		case e.node != victim:
			t.Errorf("container event on waiting node %s while Consul was down: %s", e.node, e)
		case e.sha == sha || e.action == "create" || e.action == "destroy" || e.action == "start" || e.action == "rename":
			t.Errorf("the holder %s acted without a fence while Consul was down: %s", victim, e)
		}
	}
}

// logRetries logs how often each agent logged msg: how hard it retried.
func (f *fleet) logRetries(ns []string, msg string) {
	for _, n := range ns {
		b, _ := os.ReadFile(filepath.Join(f.logs, n+".log"))
		f.t.Logf("agent %s logged %q %d times", n, msg, strings.Count(string(b), msg))
	}
}
