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
