package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// promMetrics implements agent.Metrics with Prometheus collectors.
type promMetrics struct {
	replacements *prometheus.CounterVec
	slotWait     prometheus.Histogram
	slotHold     prometheus.Histogram
	converged    prometheus.Gauge
	consulErrors prometheus.Counter
}

func newPromMetrics(reg prometheus.Registerer, group, node string) *promMetrics {
	labels := prometheus.Labels{"group": group, "node": node}
	m := &promMetrics{
		replacements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollagent_replacements_total",
			Help: "Workload replacements by result (success, failed, aborted).", ConstLabels: labels}, []string{"result"}),
		slotWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rollagent_slot_wait_seconds",
			Help: "Time spent waiting for a replacement slot.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.01, 3, 12)}),
		slotHold: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rollagent_slot_hold_seconds",
			Help: "Time a replacement slot was held.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.1, 2.5, 10)}),
		converged: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rollagent_current_sha_matches_desired",
			Help: "1 when this node runs the desired SHA.", ConstLabels: labels}),
		consulErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollagent_consul_errors_total",
			Help: "Errors talking to Consul.", ConstLabels: labels}),
	}
	reg.MustRegister(m.replacements, m.slotWait, m.slotHold, m.converged, m.consulErrors)
	return m
}

func (m *promMetrics) Replacement(result string) { m.replacements.WithLabelValues(result).Inc() }
func (m *promMetrics) SlotWait(d time.Duration)  { m.slotWait.Observe(d.Seconds()) }
func (m *promMetrics) SlotHold(d time.Duration)  { m.slotHold.Observe(d.Seconds()) }
func (m *promMetrics) ConsulError()              { m.consulErrors.Inc() }
func (m *promMetrics) Converged(ok bool) {
	if ok {
		m.converged.Set(1)
	} else {
		m.converged.Set(0)
	}
}

// serveMetrics serves /metrics on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log hclog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return nil
}
