name = "web"
container {
  image = "rollagent-demo/web:v1"
  cmd   = ["serve"]
  env   = { MODE = "prod" }
  port {
    host      = 8080
    container = 8080
  }
  healthcheck {
    test = ["CMD", "/demoapp", "health"]
  }
}
update {
  max_parallel     = 1
  min_healthy_time = "2s"
  healthy_deadline = "1m"
}
