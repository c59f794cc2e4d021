# Drained before its old container stops: the node's "web" and "web-admin"
# services go into Consul maintenance, and the agent waits 10s for load
# balancers to notice (services out of order and repeated, to show they
# are sorted and deduplicated).
container {
  image = "ghcr.io/example/web:2.0.0"
}
update {
  min_healthy_time = "30s"
  drain {
    services = ["web-admin", "web", "web-admin"]
    delay    = "10s"
  }
}
