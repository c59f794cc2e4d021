package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rollagent/rollagent/agent"
)

// promMetrics implements agent.Metrics with Prometheus collectors, and
// agent.FenceGapMetrics.
type promMetrics struct {
	replacements *prometheus.CounterVec
	slotWait     prometheus.Histogram
	slotHold     prometheus.Histogram
	fenceGap     prometheus.Histogram
	converged    prometheus.Gauge
	consulErrors prometheus.Counter
}

var _ agent.FenceGapMetrics = (*promMetrics)(nil)

func newPromMetrics(reg prometheus.Registerer, group, node string) *promMetrics {
	labels := prometheus.Labels{"group": group, "node": node}
	m := &promMetrics{
		replacements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollagent_replacements_total",
			Help: "Workload replacements by result (success, failed, aborted).", ConstLabels: labels}, []string{"result"}),
		slotWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rollagent_slot_wait_seconds",
			Help: "Time spent waiting for a replacement slot.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.01, 3, 12)}),
		slotHold: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rollagent_slot_hold_seconds",
			Help: "Time a replacement slot was held.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.1, 2.5, 10)}),
		fenceGap: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rollagent_fence_to_step_seconds",
			Help:        "Time from a fence's transaction returning OK to the runtime being let take its destructive step: what a CANCEL cannot stop.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10)}),
		converged: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rollagent_current_sha_matches_desired",
			Help: "1 when this node runs the desired SHA.", ConstLabels: labels}),
		consulErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollagent_consul_errors_total",
			Help: "Errors talking to Consul.", ConstLabels: labels}),
	}
	reg.MustRegister(m.replacements, m.slotWait, m.slotHold, m.fenceGap, m.converged, m.consulErrors)
	return m
}

func (m *promMetrics) Replacement(result string) { m.replacements.WithLabelValues(result).Inc() }
func (m *promMetrics) SlotWait(d time.Duration)  { m.slotWait.Observe(d.Seconds()) }
func (m *promMetrics) SlotHold(d time.Duration)  { m.slotHold.Observe(d.Seconds()) }
func (m *promMetrics) FenceGap(d time.Duration)  { m.fenceGap.Observe(d.Seconds()) }
func (m *promMetrics) ConsulError()              { m.consulErrors.Inc() }
func (m *promMetrics) Converged(ok bool) {
	if ok {
		m.converged.Set(1)
	} else {
		m.converged.Set(0)
	}
}

// serveHTTP serves h on addr until ctx ends, and returns the address it
// listens on (addr may name port 0).
func serveHTTP(ctx context.Context, addr string, h http.Handler, log hclog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "error", err)
		}
	}()
	log.Info("serving", "addr", ln.Addr().String())
	return ln.Addr(), nil
}

// serveMetrics serves /metrics on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log hclog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	_, err := serveHTTP(ctx, addr, mux, log)
	return err
}

// checkURLs are what the Consul agent's HTTP checks ask of the agent: the
// workload's health, and whether the agent itself answers (for its
// session). Both are empty when the agent passes TTL checks instead.
type checkURLs struct{ Health, Alive string }

// serveHealth serves the workload's health and the agent's liveness on
// addr until ctx ends, and returns their URLs for Consul's HTTP checks. A
// wildcard host becomes 127.0.0.1, which Go's wildcard listeners accept on
// IPv6 hosts too: the checks are run by the node's own Consul agent.
func serveHealth(ctx context.Context, addr string, rt healthSource, log hclog.Logger) (checkURLs, error) {
	// The liveness path is this process's own: a port freed by a killed
	// agent may be bound next by another agent on the host (of another
	// group), and the dead one's check must not pass on its answers.
	var token [8]byte
	_, _ = rand.Read(token[:])
	alive := "/alive/" + hex.EncodeToString(token[:])
	mux := http.NewServeMux()
	mux.Handle("/health", agent.HealthHandler(rt))
	mux.Handle(alive, agent.AliveHandler())
	a, err := serveHTTP(ctx, addr, mux, log)
	if err != nil {
		return checkURLs{}, err
	}
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return checkURLs{}, fmt.Errorf("listening on %s, not a TCP address", a)
	}
	host := tcp.IP
	if host.IsUnspecified() {
		host = net.IPv4(127, 0, 0, 1)
	}
	base := "http://" + net.JoinHostPort(host.String(), strconv.Itoa(tcp.Port))
	return checkURLs{Health: base + "/health", Alive: base + alive}, nil
}
