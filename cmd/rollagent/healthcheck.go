package main

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Values of --health-addr besides an address.
const (
	// healthAuto serves the workload's health on an ephemeral loopback
	// port when the Consul agent is reached over loopback, and passes a TTL
	// check otherwise.
	healthAuto = "auto"
	// healthOff passes a TTL check, as the agent always did before.
	healthOff = "off"
)

// healthSource is what serves the workload's health: the runtime.
type healthSource interface {
	Healthy(context.Context) (bool, string)
}

// workloadCheck serves the workload's health and the agent's liveness as
// --health-addr says and returns the URLs for the Consul agent's HTTP
// checks, or none for TTL checks that the agent passes itself: the
// workload's every 10 s, and its session's every second while it contends.
// Only an address the operator named is an error when it cannot be served;
// auto falls back to the TTL checks.
func (c *RunCmd) workloadCheck(ctx context.Context, consulAddr string, rt healthSource, log hclog.Logger) (checkURLs, error) {
	ttl := func(why string) (checkURLs, error) {
		log.Info("the agent passes the workload's TTL check every 10s, and its session's while it contends", "why", why)
		return checkURLs{}, nil
	}
	switch c.HealthAddr {
	case healthOff, "":
		return ttl("--health-addr=" + healthOff)
	case healthAuto:
		host, ok := loopbackHost(consulAddr)
		if !ok {
			return ttl(fmt.Sprintf("the Consul agent at %q is not on loopback, so it may not reach a port of this host; --health-addr names one it can", consulAddr))
		}
		urls, err := serveHealth(ctx, net.JoinHostPort(host, "0"), rt, log)
		if err != nil {
			log.Warn("cannot serve the workload's health on loopback", "error", err)
			return ttl("no loopback port")
		}
		log.Info("the Consul agent checks the workload's health here every 10s, and the agent's liveness", "url", urls.Health, "alive", urls.Alive)
		return urls, nil
	}
	urls, err := serveHealth(ctx, c.HealthAddr, rt, log)
	if err != nil {
		return checkURLs{}, fmt.Errorf("--health-addr %s: %w", c.HealthAddr, err)
	}
	return urls, nil
}

// loopbackHost returns the loopback IP to serve on when the Consul agent's
// HTTP address is on loopback. Loopback belongs to a network namespace, so
// an agent that reaches Consul there shares its namespace, and Consul can
// reach a loopback port of the agent's. A unix socket may be shared into
// another namespace, and a host name other than localhost may resolve
// anywhere: neither counts.
func loopbackHost(consulAddr string) (string, bool) {
	a := strings.TrimPrefix(strings.TrimPrefix(consulAddr, "http://"), "https://")
	if strings.HasPrefix(a, "unix://") {
		return "", false
	}
	host := a
	if h, _, err := net.SplitHostPort(a); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return "127.0.0.1", true
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil || !ip.IsLoopback():
		return "", false
	case ip.To4() == nil:
		return "::1", true
	}
	return "127.0.0.1", true
}
