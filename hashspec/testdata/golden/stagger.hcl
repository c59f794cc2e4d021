# Two slots, and after each release the next grant waits five minutes.
container {
  image = "ghcr.io/example/web:2.0.0"
}
update {
  max_parallel = 2
  stagger      = "300s"
}
