# start-first with an unpublished port and a named volume.
container {
  image = "ghcr.io/example/worker:1.4.2"
  port {
    container = 8080
  }
  volume {
    source = "worker-state"
    target = "/state"
  }
  restart = "always"
}
update {
  max_parallel     = 2
  order            = "start-first"
  failure_action   = "continue"
  max_failures     = 4
  min_healthy_time = "1m"
  healthy_deadline = "1h"
}
