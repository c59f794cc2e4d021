# The demo web app, release v2, for the Compose example fleet: a release
# that also gives the workload a second to start before a failed probe counts.
name = "web"
container {
  image = "rollagent-demo/web:v2"
  env   = { RELEASE = "v2" }
  healthcheck {
    test     = ["CMD", "/demoapp", "health"]
    interval = "1s"
    timeout  = "1s"
    retries  = 2

    start_period = "1s"
  }
}
update {
  max_parallel     = 1
  min_healthy_time = "2s"
  healthy_deadline = "1m"
  failure_action   = "pause"
  max_failures     = 1
}
