# Two canaries take the new SHA first; once both have stayed healthy for
# ten minutes the rest follow, one at a time, with no `rollagent promote`.
container {
  image = "ghcr.io/example/web:2.0.0"
}
update {
  canary              = 2
  canary_healthy_time = "600s"
  auto_promote        = true
}
