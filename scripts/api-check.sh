#!/usr/bin/env bash
# api-check.sh: the public Go API of the working tree against the last release HEAD contains
# (scripts/last-release.sh: api/releases.txt, else the newest v* tag), with
# golang.org/x/exp/cmd/apidiff in module mode. `make api-check` (and `make lint`) run it from the
# repository's root.
#
# The public packages are every package of the module not under internal/, samples/, bench/ or
# cmd/. An incompatible change fails the check unless its line, exactly as printed below, is in
# api/incompatible.txt (one per line; blank lines and # comments are ignored). The policy is in
# docs/upgrading.md and CHANGELOG.md's header.
#
# Environment:
#   API_BASE        the git ref to compare against (default: the last release, scripts/last-release.sh)
#   API_ALLOW       the file of accepted incompatible changes (default: api/incompatible.txt)
#   APIDIFF_VERSION the x/exp version apidiff is built at, once, into bin/
#   APIDIFF_BIN     the directory apidiff is built into and run from (default: bin/ of the checkout)
#
# Exit status: 0 compatible (or every incompatible change accepted), 1 an unaccepted incompatible
# change, 2 the check could not run (no release known, a build failure).
set -euo pipefail

APIDIFF_VERSION=${APIDIFF_VERSION:-v0.0.0-20261113113407-e3970619a1a4}
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(git rev-parse --show-toplevel 2>/dev/null) || {
	echo "api-check: not in a git checkout" >&2
	exit 2
}
cd "$root"
allow=${API_ALLOW:-api/incompatible.txt}
module=$(go list -m)
bin=$root/bin
tools=${APIDIFF_BIN:-$bin}
apidiff=$tools/apidiff
stamp=$tools/.apidiff-$APIDIFF_VERSION

fail() {
	echo "api-check: $*" >&2
	exit 2
}

# The base: API_BASE, else the last release HEAD contains, as scripts/last-release.sh finds it
# (api/releases.txt, else the newest v* tag reachable from HEAD).
if [[ -n ${API_BASE:-} ]]; then
	base=$API_BASE
	base_commit=$(git rev-parse --verify --quiet "$base^{commit}") || fail "API_BASE=$base is not a commit"
else
	release=$("$scripts/last-release.sh") ||
		fail "there is no release to compare the API with: record one in api/releases.txt, fetch the tags (a shallow clone needs git fetch --unshallow), or name a ref with API_BASE=<ref>"
	base=${release%% *}
	base_commit=${release#* }
fi

# apidiff, built once per version into bin/.
if [[ ! -x $apidiff || ! -e $stamp ]]; then
	echo "api-check: building apidiff $APIDIFF_VERSION into $tools (once)" >&2
	mkdir -p "$tools"
	GOBIN=$tools GOFLAGS=-mod=mod go install "golang.org/x/exp/cmd/apidiff@$APIDIFF_VERSION" ||
		fail "could not build golang.org/x/exp/cmd/apidiff@$APIDIFF_VERSION"
	rm -f "$tools"/.apidiff-*
	touch "$stamp"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The base's export data, cached in bin/ by commit: a tag's tree never changes.
old=$bin/api/$base_commit.api
if [[ ! -s $old ]]; then
	mkdir -p "$tmp/base" "$bin/api"
	git archive "$base_commit" | tar -x -C "$tmp/base"
	(cd "$tmp/base" && GOWORK=off GOFLAGS=-mod=mod "$apidiff" -m -w "$tmp/old.api" "$module") 2>"$tmp/old.err" || {
		cat "$tmp/old.err" >&2
		fail "could not read the API of $base ($base_commit)"
	}
	mv "$tmp/old.api" "$old"
fi
(GOWORK=off "$apidiff" -m -w "$tmp/new.api" "$module") 2>"$tmp/new.err" || {
	cat "$tmp/new.err" >&2
	fail "could not read the API of the working tree"
}

# Module mode prints each change as "- <package path relative to the module>: <change>" ("- ." is the
# root package). Only the public packages count.
# The full report has an "Incompatible changes:" section, then a "Compatible changes:" one.
"$apidiff" -m "$old" "$tmp/new.api" >"$tmp/report" 2>"$tmp/report.err" || {
	cat "$tmp/report.err" >&2
	fail "apidiff could not compare the two APIs"
}
public() { grep -Ev '^(\./)?(internal|samples|bench|cmd)(/|[.:])|/internal(/|[.:])' || true; }
awk '/^Incompatible changes:/ { s = 1; next } /^Compatible changes:/ { s = 0; next } s && sub(/^- /, "")' "$tmp/report" |
	public >"$tmp/incompatible"
awk '/^Compatible changes:/ { s = 1; next } /^Incompatible changes:/ { s = 0; next } s && sub(/^- /, "")' "$tmp/report" |
	public >"$tmp/compatible"

accepted=$tmp/accepted
if [[ -f $allow ]]; then
	{ grep -Ev '^[[:space:]]*(#|$)' "$allow" || true; } | sed 's/^- //; s/[[:space:]]*$//' | sort -u >"$accepted"
else
	: >"$accepted"
fi
sort -u "$tmp/incompatible" -o "$tmp/incompatible"
unaccepted=$(comm -23 "$tmp/incompatible" "$accepted")
stale=$(comm -13 "$tmp/incompatible" "$accepted")

n=$(grep -c . "$tmp/incompatible" || true)
if [[ -n $unaccepted ]]; then
	echo "api-check: incompatible changes to the public API since $base, not accepted in $allow:"
	echo "$unaccepted" | sed 's/^/  /'
	echo "api-check: keep the old API, or accept each change by adding its line above to $allow"
	echo "api-check: (and say so under Changed or Removed in CHANGELOG.md); see docs/upgrading.md#the-api-check"
	exit 1
fi
if [[ -n $stale ]]; then
	echo "api-check: note: lines of $allow that no longer match a change (remove them):"
	echo "$stale" | sed 's/^/  /'
fi
if [[ -s $tmp/compatible ]]; then
	echo "api-check: compatible changes since $base:"
	sed 's/^/  /' "$tmp/compatible"
fi
if [[ $n -eq 0 ]]; then
	echo "api-check: the public API is compatible with $base"
else
	echo "api-check: the public API is compatible with $base but for the $n incompatible change(s) accepted in $allow"
fi
