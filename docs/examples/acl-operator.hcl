# Consul ACL policy for an operator of one group (commit, cancel, pause, resume,
# rollback, node rm, status, history). Replace "web" with the group.
key_prefix "rollagent/groups/web/" {
  policy = "write"
}
# For status: which of the group's nodes Consul sees down, or gone.
service "rollagent-web" {
  policy = "read"
}
# And each agent's liveness check, on its instance of the service
# "rollagent": status counts a node whose agent is down. Without it, status
# says that it cannot tell which nodes are down (Consul leaves those checks
# out, and says so).
service "rollagent" {
  policy = "read"
}
node_prefix "" {
  policy = "read"
}
# The groups the group's specs name in update.after ("managers" here): a
# commit reads each one's desired spec to refuse a cycle, and status how
# far each has converged. One rule per group named; none if the specs name
# none.
key_prefix "rollagent/groups/managers/" {
  policy = "read"
}
# And its service, so that a node of it lost from the catalog no longer
# counts (without it, every node that has a record counts).
service "rollagent-managers" {
  policy = "read"
}
