#!/usr/bin/env bash
# Runs govulncheck on every package against a vulnerability database built
# locally, so that it needs nothing but the Go module proxy: the OSV entries
# come from the golang.org/x/vulndb module (data/osv/*.json), and its own
# cmd/indexdb turns them into the v1 database that `govulncheck -db file://`
# reads. The database is built once per vulndb version into the user cache
# dir and reused. Bump VULNDB_VERSION to get newer entries.
#
# Exit status is govulncheck's: 0 when no reachable vulnerability is found,
# 3 when one is. Findings in the standard library are fixed by a newer Go.
#
# It is not part of `make test` yet: with vulndb of 2026-11-05 it reports
# standard library entries fixed only in a newer Go patch release than this
# project's machines have, and two in github.com/docker/docker v28, which has
# no fixed version (the module is succeeded by the github.com/moby/moby
# modules). Both need a decision, not a test failure on every commit.
set -euo pipefail

vuln_version="${VULN_VERSION:-v1.9.0}"
vulndb_version="${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rollagent/vulndb-${vulndb_version}"

if [ ! -f "$cache/index/db.json" ]; then
  echo "building the vulnerability database from golang.org/x/vulndb@${vulndb_version} into $cache (once)" >&2
  mkdir -p "$(dirname "$cache")"
  # Outside the clone, so that the download cannot touch go.mod or go.sum.
  src="$(cd "$(dirname "$cache")" && go mod download -json "golang.org/x/vulndb@${vulndb_version}" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  if [ -z "$src" ] || [ ! -d "$src/data/osv" ]; then
    echo "golang.org/x/vulndb@${vulndb_version} has no data/osv directory; cannot build the database" >&2
    exit 1
  fi
  tmp="$(mktemp -d "$cache.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  go run "golang.org/x/vulndb/cmd/indexdb@${vulndb_version}" -vulns "$src/data/osv" -out "$tmp" >&2
  rm -rf "$cache"
  mv "$tmp" "$cache"
  trap - EXIT
  echo "built $(find "$cache/ID" -name '*.json' | wc -l) entries" >&2
fi

# Installed, not run with go run, so that its exit status reaches the caller.
bin="$(dirname "$cache")/govulncheck-${vuln_version}"
if [ ! -x "$bin/govulncheck" ]; then
  GOBIN="$bin" go install "golang.org/x/vuln/cmd/govulncheck@${vuln_version}"
fi

cd "$root"
echo "govulncheck ${vuln_version}, database golang.org/x/vulndb@${vulndb_version}, $(go version)" >&2
exec "$bin/govulncheck" -db "file://$cache" "${@:-./...}"
