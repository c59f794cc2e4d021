#!/usr/bin/env bash
# Prints the path of a promtool that the alert rule tests can use. Debian's
# prometheus package ships one; rather than install the package (whose
# postinst sets up and starts a Prometheus server), it is downloaded and
# only usr/bin/promtool is unpacked into the user cache dir, once.
set -euo pipefail

cache="${XDG_CACHE_HOME:-$HOME/.cache}/rollagent/promtool"
bin="$cache/promtool"

usable() { "$1" --version >/dev/null 2>&1; }

if [ -n "${ROLLAGENT_PROMTOOL:-}" ]; then
  usable "$ROLLAGENT_PROMTOOL" || { echo "ROLLAGENT_PROMTOOL=$ROLLAGENT_PROMTOOL does not run" >&2; exit 1; }
  echo "$ROLLAGENT_PROMTOOL"; exit 0
fi
if onpath="$(command -v promtool 2>/dev/null)" && usable "$onpath"; then
  echo "$onpath"; exit 0
fi
if [ -x "$bin" ] && usable "$bin"; then
  echo "$bin"; exit 0
fi

command -v apt-get >/dev/null 2>&1 || { echo "no promtool on PATH and no apt-get to fetch Debian's; set ROLLAGENT_PROMTOOL" >&2; exit 1; }
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/fetch.XXXXXX")"
# As root, apt fetches as its _apt user, which may not enter the cache dir.
download() { (cd "$tmp" && if [ "$(id -u)" -eq 0 ]; then apt-get download -o APT::Sandbox::User=root prometheus; else apt-get download prometheus; fi) >&2; }
trap 'rm -rf "$tmp"' EXIT
# A clean machine may have no package lists yet; only root can fetch them.
if ! download; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq >&2
    download
  else
    echo "apt-get download prometheus failed; run apt-get update as root, or set ROLLAGENT_PROMTOOL" >&2
    exit 1
  fi
fi
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
mv "$tmp/root/usr/bin/promtool" "$bin"
usable "$bin" || { echo "unpacked $bin but it does not run" >&2; exit 1; }
echo "fetched $("$bin" --version 2>&1 | head -1) from Debian's prometheus package" >&2
echo "$bin"
