# A rollout in which no node converges for 20 minutes of open gate counts
# as failed: failure_action applies once.
container {
  image = "ghcr.io/example/web:2.0.0"
}
update {
  max_parallel      = 2
  healthy_deadline  = "5m"
  failure_action    = "continue"
  progress_deadline = "20m"
}
