// Package integration holds multi-host tests on real components: a 3-server
// Consul cluster and a fleet of node containers on a private Docker network,
// driven by one Go test binary through the Docker Engine API.
package integration
