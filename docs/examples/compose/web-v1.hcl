# The demo web app, release v1, for the Compose example fleet.
name = "web"
container {
  image = "rollagent-demo/web:v1"
  env   = { RELEASE = "v1" }
  healthcheck {
    test     = ["CMD", "/demoapp", "health"]
    interval = "1s"
    timeout  = "1s"
    retries  = 2
  }
}
update {
  max_parallel     = 1
  min_healthy_time = "2s"
  healthy_deadline = "1m"
  failure_action   = "pause"
  max_failures     = 1
}
