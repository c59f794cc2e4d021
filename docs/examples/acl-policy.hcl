# Minimal Consul ACL policy for rollagent (tested in cmd/rollagent/acl_test.go).
#
# For an agent (`rollagent run`) on a node:
#   - its group's state in KV (read desired/history, write nodes/, slot/, failures/,
#     failcount/, pause/, and desired for failure_action=rollback),
#   - a session for its slot, bound to checks on its node,
#   - its service rollagent-<group>, with the workload health check and the
#     TTL check its session is bound to (service write covers both),
#   - node read: it registers no node-level check.
# Scope key_prefix and service_prefix to one group ("rollagent/groups/web/",
# "rollagent-web") to keep a node of group web out of every other group.
key_prefix "rollagent/groups/" {
  policy = "write"
}
session_prefix "" {
  policy = "write"
}
service_prefix "rollagent-" {
  policy = "write"
}
node_prefix "" {
  policy = "read"
}
