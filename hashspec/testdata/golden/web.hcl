name = "web"
container {
  image      = "demo:v2"
  cmd        = ["serve", "--port", "8080"]
  env        = { MODE = "prod", LEVEL = "info" }
  labels     = { team = "core" }
  restart    = "unless-stopped"
  port {
    host      = 8080
    container = 8080
  }
  volume {
    source    = "/srv/data"
    target    = "/data"
    read_only = true
  }
  healthcheck {
    test     = ["CMD", "/demo", "health"]
    interval = "2s"
  }
}
update {
  max_parallel     = 1
  min_healthy_time = "5s"
  healthy_deadline = "2m"
  failure_action   = "pause"
  max_failures     = 1
  order            = "stop-first"
}
