# Spread over zones: besides max_parallel = 2, at most one node of each
# value of the Consul node meta "zone" is unavailable at once.
container {
  image = "ghcr.io/example/web:2.0.0"
}
update {
  max_parallel = 2
  max_parallel_per {
    key = "zone"
    max = 1
  }
}
