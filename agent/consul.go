package agent

import "github.com/hashicorp/consul/api"

// ConsulConfig is api.DefaultConfig, which reads the CONSUL_* environment,
// for an agent's Consul client, with response compression off. An agent
// talks to its node's Consul agent, over loopback as a rule, and Consul
// gzips every response of 1,400 bytes or more: the list of the line that a
// contender reads when it joins grows with the fleet, and deflating it took
// a quarter of a Consul client agent's CPU in the fleet benchmark, to save
// nothing on loopback.
func ConsulConfig() *api.Config {
	cfg := api.DefaultConfig()
	cfg.Transport.DisableCompression = true
	return cfg
}
