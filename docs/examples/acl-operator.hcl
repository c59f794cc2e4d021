# Consul ACL policy for an operator of one group (commit, cancel, resume,
# rollback, status, history). Replace "web" with the group.
key_prefix "rollagent/groups/web/" {
  policy = "write"
}
