#!/usr/bin/env bash
# Prints the path of a Consul binary that rollagent's tests and demo can use,
# building the pinned MPL-licensed release once into the user cache dir when
# there is none. The cache sits outside the clone so that every later run,
# CI included, reuses the ~5 minute build.
set -euo pipefail

version="${CONSUL_VERSION:-1.13.9}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rollagent/consul-${version}"
bin="$cache/consul"

usable() { # accept consul 1.13 or newer
  local v
  v="$("$1" version 2>/dev/null | sed -n 's/^Consul v\([0-9]*\)\.\([0-9]*\)\..*/\1 \2/p')" || return 1
  [ -n "$v" ] || return 1
  set -- $v
  [ "$1" -gt 1 ] || { [ "$1" -eq 1 ] && [ "$2" -ge 13 ]; }
}

if [ -n "${ROLLAGENT_CONSUL:-}" ]; then
  usable "$ROLLAGENT_CONSUL" || { echo "ROLLAGENT_CONSUL=$ROLLAGENT_CONSUL is not a consul of 1.13 or newer" >&2; exit 1; }
  echo "$ROLLAGENT_CONSUL"; exit 0
fi
if onpath="$(command -v consul 2>/dev/null)" && usable "$onpath"; then
  echo "$onpath"; exit 0
fi
if [ -x "$bin" ] && usable "$bin"; then
  echo "$bin"; exit 0
fi

echo "building Consul ${version} (MPL-2.0) into $cache; this takes a few minutes once" >&2
mkdir -p "$cache"
tmp="$(mktemp "$cache/consul.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
start=$(date +%s)
(cd "$root/tools/consul" && CGO_ENABLED=0 go build -trimpath -o "$tmp" .) >&2
mv "$tmp" "$bin"
trap - EXIT
echo "built Consul ${version} in $(( $(date +%s) - start ))s" >&2
usable "$bin" || { echo "built $bin but it does not report Consul 1.13+" >&2; exit 1; }
echo "$bin"
