package agent

import (
	"cmp"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/lockstep"
)

// serviceCheckTTL is the TTL of the workload health check in the Consul UI;
// it is passed every third of that.
const serviceCheckTTL = 30 * time.Second

// workloadHealth is the workload's health as the service's check shows it,
// and its only owner: it reads the runtime's view, passes or fails the TTL
// check with it, and tells the agent's loop when the workload went down or
// came back.
type workloadHealth struct {
	store *coordinator.Store
	group string
	node  string
	log   hclog.Logger
	judge HealthJudge
	// downChanged is a buffered(1) signal to the agent's loop that the
	// workload went down or came back, so that its record says so.
	downChanged chan struct{}

	mu     sync.Mutex
	status string // api.HealthPassing, api.HealthWarning or api.HealthCritical
}

func (h *workloadHealth) checkID() string { return coordinator.WorkloadCheckID(h.group, h.node) }

// readHealth asks the runtime for the workload's health, notes it for the
// next registration, and returns it as a check status with the reason:
// critical only when the workload is down by a sustained signal
// (HealthJudge), warning while it is failing short of that.
func (h *workloadHealth) readHealth(ctx context.Context) (status, why string) {
	v, why := h.judge.Health(ctx)
	status = checkStatus[v]
	h.mu.Lock()
	was := h.status
	h.status = status
	h.mu.Unlock()
	if was != "" && (was == api.HealthCritical) != (status == api.HealthCritical) {
		select {
		case h.downChanged <- struct{}{}:
		default:
		}
	}
	return status, why
}

// last is the status of the last reading, or healthNotRead.
func (h *workloadHealth) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return cmp.Or(h.status, healthNotRead)
}

// healthNotRead is the workload check's status when it is registered
// before any reading: warning, which does not count the node down, until
// the first reading, made at once, says.
const healthNotRead = api.HealthWarning

// checkStatus is the workload check's status for each Health.
var checkStatus = map[Health]string{HealthUp: api.HealthPassing, HealthFailing: api.HealthWarning, HealthDown: api.HealthCritical}

// keepHealth passes or fails the service's TTL check from the runtime's
// view of the workload until ctx ends.
func (h *workloadHealth) keepHealth(ctx context.Context) {
	tick := time.NewTicker(serviceCheckTTL / 3)
	defer tick.Stop()
	for {
		status, why := h.readHealth(ctx)
		if err := h.store.UpdateTTL(ctx, h.checkID(), why, status); err != nil && ctx.Err() == nil {
			h.log.Debug("could not update the workload check", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// workloadCheck is the service's check of the workload's health, starting
// at health. Consul 1.13 applies that status to a new check only (a first
// registration, or a Consul agent that lost its state): an existing check
// keeps its status and output through every registration, even one that
// replaces the checks (agent.go, addServiceInternal, restores them).
func (s *catalog) workloadCheck(health string) *api.AgentServiceCheck {
	c := &api.AgentServiceCheck{CheckID: s.health.checkID(), Name: "workload health", Status: health,
		Notes: "passing while the managed workload is healthy"}
	if s.healthURL == "" {
		c.TTL = serviceCheckTTL.String()
		return c
	}
	c.HTTP, c.Method = s.healthURL, http.MethodGet
	c.Interval, c.Timeout = HealthCheckInterval.String(), healthCheckTimeout.String()
	c.Notes += "; asked of the rollagent agent, so it fails while the agent is down"
	return c
}

// aliveFailures is how many of the alive check's runs in a row must fail
// before Consul marks it critical, which ends the session: as long as a
// TTL check gives, so one slow answer does not cost a holder its slot.
// Consul arms a check it has just registered to change its status at its
// first run, so the alive check is registered once (registerAlive): only
// that first run, within one interval of the agent's start (or of a Consul
// agent that lost the check), can end the session alone.
const aliveFailures = 3

// aliveCheck is the check a long-lived session is bound to. It asks
// nothing of the workload: only whether this process answers.
func (s *catalog) aliveCheck() *api.AgentServiceCheck {
	return &api.AgentServiceCheck{CheckID: s.aliveID, Name: "rollagent alive", Status: api.HealthPassing,
		HTTP: s.aliveURL, Method: http.MethodGet, Interval: s.aliveEvery.String(), Timeout: s.aliveEvery.String(),
		FailuresBeforeCritical: aliveFailures, Notes: lockstep.AliveNotes}
}
