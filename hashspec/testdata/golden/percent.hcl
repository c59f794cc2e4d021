# A quarter of the group's nodes at once (rounded down, at least 1), and
# the rollout pauses once a tenth of them have failed.
container {
  image = "ghcr.io/example/web:2.0.0"
}
update {
  max_parallel = "25%"
  max_failures = "10%"
}
