# The workers of a Swarm: they move only once the managers and the
# ingress group have converged on their own desired SHAs (named out of
# order and repeated, to show they are sorted and deduplicated), and the
# node where the Consul check "swarm-leader" passes goes last.
name = "workers"
container {
  image = "ghcr.io/example/web:2.0.0"
}
update {
  after = ["managers", "ingress", "managers"]
  last {
    check = "swarm-leader"
  }
}
