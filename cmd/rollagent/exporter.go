package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/retry"
	"github.com/rollagent/rollagent/internal/wallclock"
	"github.com/rollagent/rollagent/internal/watch"
)

// ExporterCmd serves the metrics of whole groups, for alerting. One process
// reads each group's tree; the agents do not, as a read per agent of every
// node's record would grow with the square of the fleet.
type ExporterCmd struct {
	Listen    string        `default:"127.0.0.1:9469" help:"Serve Prometheus metrics at /metrics on this address."`
	LostAfter time.Duration `name:"lost-after" default:"${lost_after}" help:"How long a node gone from Consul's catalog still counts toward progress, as in status."`
	Groups    []string      `arg:"" name:"group" help:"Groups to export."`
}

// Defaults of exporterOptions.
const (
	// exporterWait bounds a blocking read: a group with no change is read
	// again this often, which refreshes the nodes Consul sees down.
	exporterWait = 30 * time.Second
	// exporterMinInterval spaces the reads of a busy group: a rollout of
	// many nodes changes the tree several times a second, and each read
	// lists every node.
	exporterMinInterval = time.Second
	// exporterRetryMax caps the pause between failed reads.
	exporterRetryMax = 10 * time.Second
)

// exporterOptions tune how often the exporter reads each group.
type exporterOptions struct {
	Wait, MinInterval, RetryMax time.Duration
	// Timeout bounds a read past its Wait (--timeout): a Consul that
	// takes the request and never answers must turn up to 0, not leave
	// the last state exported as if it were current.
	Timeout time.Duration
	// LostAfter is status's --lost-after, for the nodes counted lost.
	LostAfter time.Duration
}

func defaultExporterOptions() exporterOptions {
	return exporterOptions{Wait: exporterWait, MinInterval: exporterMinInterval,
		RetryMax: exporterRetryMax, Timeout: DefaultTimeout, LostAfter: coordinator.DefaultLostAfter}
}

// boundsItself: the exporter runs until interrupted, each read bounded by
// exporterOptions.Timeout, rather than ending at --timeout.
func (*ExporterCmd) boundsItself() bool { return true }

// Run serves the metrics until interrupted.
func (c *ExporterCmd) Run(ctx context.Context, g *Globals, log hclog.Logger) error {
	st, err := g.store()
	if err != nil {
		return err
	}
	for _, group := range c.Groups {
		if _, err := st.Keys(group); err != nil {
			return err
		}
	}
	log = log.Named("exporter")
	opts := defaultExporterOptions()
	opts.Timeout, opts.LostAfter = g.Timeout, c.LostAfter
	_, wait, err := exportGroups(ctx, st, c.Groups, c.Listen, opts, log)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", c.Listen, err)
	}
	wait()
	return nil
}

// exportGroups serves /metrics on addr and follows each group until ctx
// ends; wait returns once every follower has stopped.
func exportGroups(ctx context.Context, st *coordinator.Store, groups []string, addr string,
	opts exporterOptions, log hclog.Logger) (net.Addr, func(), error) {
	st = st.WithLostAfter(opts.LostAfter) // update.after and update.last count as the metrics do
	col := newGroupCollector(groups, opts.LostAfter, wallclock.Now)
	reg := prometheus.NewRegistry()
	reg.MustRegister(col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	a, err := serveHTTP(ctx, addr, mux, log)
	if err != nil {
		return nil, nil, err
	}
	var wg sync.WaitGroup
	for _, group := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			followGroup(ctx, st, group, col, opts, log.With("group", group))
		}()
	}
	return a, wg.Wait, nil
}

// followGroup reads group with blocking queries into col until ctx ends,
// retrying every failure with a growing pause: the exporter is what tells
// that Consul cannot be read, so it never gives up.
func followGroup(ctx context.Context, st *coordinator.Store, group string, col *groupCollector, opts exporterOptions, log hclog.Logger) {
	pause := retry.NewSteady(opts.MinInterval, opts.RetryMax)
	onError := func(err error, retryIn time.Duration) {
		col.failed(group)
		log.Warn("cannot read the group", "error", err, "retry_in", retryIn)
	}
	// A restarted Consul may have reset its indexes: the read after a
	// failure starts over.
	w := watch.Options{MinInterval: opts.MinInterval, Backoff: pause, ResetOnError: true, OnError: onError}
	watch.Run(ctx, w, func(ctx context.Context, index uint64) (uint64, bool, error) {
		gs, err := readGroupWait(ctx, st, group, index, opts.Wait, opts.Timeout)
		switch {
		case ctx.Err() != nil:
			return 0, true, nil
		case err != nil:
			return 0, false, err
		case index == 0 || pause.Retrying():
			log.Info("reading the group", "index", gs.Index)
		}
		col.read(gs)
		return gs.Index, false, nil
	})
}
