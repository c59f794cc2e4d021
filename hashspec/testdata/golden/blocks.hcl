# Blocked while the primary database or the replication-lag check is not
# passing anywhere, or the disk check of the node itself (blocks out of
# order and repeated, to show they are sorted and deduplicated).
container {
  image = "ghcr.io/example/web:2.0.0"
}
update {
  max_parallel = 2
  block_on {
    check = "replication-lag"
  }
  block_on {
    service = "postgres"
    tag     = "primary"
  }
  block_on {
    check = "replication-lag"
  }
  block_on_node {
    check = "disk"
  }
}
