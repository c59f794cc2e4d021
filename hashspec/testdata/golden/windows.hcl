# Two maintenance windows: weekday nights in Berlin, and Sunday mornings
# in UTC (days out of order, to show they are put in week order).
container {
  image = "ghcr.io/example/web:2.0.0"
}
update {
  max_parallel = 2
  window {
    days      = ["fri", "mon", "tue", "wed", "thu"]
    start     = "02:00"
    length    = "3h"
    time_zone = "Europe/Berlin"
  }
  window {
    days   = ["sun"]
    start  = "06:30"
    length = "90m"
  }
}
