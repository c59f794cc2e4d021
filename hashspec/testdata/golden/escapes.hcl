# Pins string escaping in the canonical encoding: quotes, backslashes,
# tabs, newlines (allowed in labels), HTML-ish characters and non-ASCII
# must all keep their SHA.
name = "escapes"
container {
  image = "busybox"
  cmd   = ["sh", "-c", "echo \"<hi & bye>\"\tdone\\"]
  env = {
    GREETING = "grüße, 世界 ✓"
  }
  labels = {
    "com.example.note" = "line one\nline two"
    "z"                = "\u0001"
  }
  healthcheck {
    test = ["NONE"]
  }
}
update {
  order = "start-first"
}
