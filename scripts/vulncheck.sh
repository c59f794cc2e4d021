#!/usr/bin/env bash
# Runs govulncheck on every package against a vulnerability database built
# locally, so that it needs nothing but the Go module proxy: the OSV entries
# come from the golang.org/x/vulndb module (data/osv/*.json), and its own
# cmd/indexdb turns them into the v1 database that `govulncheck -db file://`
# reads. The database is built once per vulndb version into the user cache
# dir and reused. Bump VULNDB_VERSION to get newer entries.
#
# It fails on any vulnerability reachable from this module's code unless
# scripts/vulncheck-accepted.txt lists its ID with the reason it does not
# reach rollagent. Standard library findings are fixed by a newer Go patch
# release: go.mod's toolchain line names it, and the Makefile's
# GOTOOLCHAIN=auto fetches it.
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
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
status=0
"$bin/govulncheck" -db "file://$cache" "${@:-./...}" >"$out" 2>&1 || status=$?
cat "$out"
case "$status" in
0) exit 0 ;;
3) ;; # vulnerabilities found: judged against the accepted list below
*) echo "govulncheck failed (exit $status)" >&2; exit "$status" ;;
esac
accepted="$root/scripts/vulncheck-accepted.txt"
found="$(grep -oE '^Vulnerability #[0-9]+: GO-[0-9]+-[0-9]+' "$out" | sed 's/.*: //' | sort -u)"
if [ -z "$found" ]; then
  echo "govulncheck exited 3 but named no vulnerability; cannot judge its output" >&2
  exit 3
fi
new=0
for id in $found; do
  if grep -qE "^${id}[[:space:]]" "$accepted"; then
    echo "accepted: $(grep -E "^${id}[[:space:]]" "$accepted")" >&2
  else
    echo "NOT ACCEPTED: $id is reachable from this module's code (see above)" >&2
    new=1
  fi
done
exit "$new"
