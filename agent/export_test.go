package agent

// WithoutStateMirror returns c with the node's state kept out of its Consul
// service: for the fleet bench's diagnostic rows, which show what mirroring
// it costs a Consul agent that carries every node's service.
func WithoutStateMirror(c Config) Config {
	c.noStateMirror = true
	return c
}
