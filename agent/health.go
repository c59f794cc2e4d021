package agent

import (
	"context"
	"net/http"
	"time"
)

const (
	// HealthCheckInterval is how often Consul runs an HTTP workload check:
	// as often as a TTL check is passed. The run command's help states it.
	HealthCheckInterval = serviceCheckTTL / 3
	// healthCheckTimeout bounds one run of it, and the runtime's look.
	healthCheckTimeout = 5 * time.Second
)

// healthReader is the part of a Runtime that HealthHandler needs.
type healthReader interface {
	Healthy(ctx context.Context) (bool, string)
}

// HealthHandler answers Consul's HTTP workload check (Config.HealthURL)
// with the runtime's view of the workload: 200 while it is healthy, 429
// (which Consul shows as warning) while it is failing but not yet down,
// 503 (critical) once it is down, with the runtime's reason as the body,
// which Consul shows as the check's output. Only critical counts against
// max_parallel, so down must be a sustained signal (HealthJudge): a
// runtime that keeps no health history of its own is judged here over
// DefaultDownAfter, from the readings this handler makes. A dead agent
// answers nothing, which Consul shows as critical too.
func HealthHandler(rt healthReader) http.Handler {
	judge := judgeOf(rt, DefaultDownAfter)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), healthCheckTimeout)
		defer cancel()
		h, why := judge.Health(ctx)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		status, word := http.StatusOK, "healthy"
		switch h {
		case HealthFailing:
			status, word = http.StatusTooManyRequests, "failing, not down yet"
		case HealthDown:
			status, word = http.StatusServiceUnavailable, "unhealthy"
		}
		w.WriteHeader(status)
		if why != "" {
			word += ": " + why
		}
		_, _ = w.Write([]byte(word + "\n"))
	})
}

// AliveHandler answers Consul's HTTP check of the agent's liveness
// (Config.AliveURL), to which its session is bound: 200 while the process
// serves. It asks nothing of the workload, whose health must not end a
// session in the middle of a replacement.
func AliveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("alive\n"))
	})
}
