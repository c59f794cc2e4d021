# Consul ACL policy for an operator of one group (commit, cancel, pause, resume,
# rollback, node rm, status, history). Replace "web" with the group.
key_prefix "rollagent/groups/web/" {
  policy = "write"
}
# For status: which of the group's nodes Consul sees down, or gone.
service "rollagent-web" {
  policy = "read"
}
node_prefix "" {
  policy = "read"
}
