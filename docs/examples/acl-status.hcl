# Consul ACL policy for watching one group (status, history), for a
# dashboard or an on-call read-only token: it changes nothing. Replace
# "web" with the group.
key_prefix "rollagent/groups/web/" {
  policy = "read"
}
service "rollagent-web" {
  policy = "read"
}
node_prefix "" {
  policy = "read"
}
# The health of what a spec blocks on (update.block_on and block_on_node):
# any service's and node's checks. Narrow it to the services the group's
# specs name (service "postgres" { policy = "read" }) if you like; a check
# the token may not read keeps the gate closed, and says so.
service_prefix "" {
  policy = "read"
}
# The groups the group's specs name in update.after ("managers" here):
# status reads how far each has converged, as the agents do. One rule per
# group named; none if the specs name none.
key_prefix "rollagent/groups/managers/" {
  policy = "read"
}
