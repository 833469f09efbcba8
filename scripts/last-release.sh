#!/usr/bin/env bash
# last-release.sh: print the last release HEAD contains, as "<version> <commit>", for the API check
# and the rolling-upgrade test.
#
# The record is api/releases.txt ("<version> <full commit>" per line, oldest first), because a clone
# of a branch need not carry tags: its last line whose commit is an ancestor of HEAD. The newest v*
# tag reachable from HEAD takes its place when there is no such line or the tag is later in history
# (a release tagged before its line was added). A tag that names a recorded version at another
# commit is an error: the two records must agree.
#
# Exit status: 0 printed, 2 no release is known (or the records disagree), with the reason on stderr.
set -euo pipefail

root=$(git rev-parse --show-toplevel 2>/dev/null) || {
	echo "last-release: not in a git checkout" >&2
	exit 2
}
cd "$root"
record=${RELEASES:-api/releases.txt}

version= commit=
if [[ -f $record ]]; then
	while read -r v c rest; do
		[[ -z $v || $v == \#* ]] && continue
		if [[ ! $v =~ ^v[0-9]+\.[0-9]+\.[0-9]+ || ! $c =~ ^[0-9a-f]{40}$ || -n $rest ]]; then
			echo "last-release: $record: line \"$v $c $rest\" is not \"<vX.Y.Z> <40-hex commit>\"" >&2
			exit 2
		fi
		if git merge-base --is-ancestor "$c" HEAD 2>/dev/null; then
			version=$v commit=$c
		fi
	done <"$record"
fi
if [[ -n $version ]] && tagged=$(git rev-parse --verify --quiet "refs/tags/$version^{commit}") && [[ $tagged != "$commit" ]]; then
	echo "last-release: $record names $version at $commit, but the tag $version is at $tagged" >&2
	exit 2
fi
# The newest v* tag reachable from HEAD, when there is no record or the tag is later in history.
if tag=$(git describe --tags --abbrev=0 --match 'v*' HEAD 2>/dev/null); then
	tag_commit=$(git rev-parse --verify "$tag^{commit}")
	if [[ -z $version ]] || { [[ $tag_commit != "$commit" ]] && git merge-base --is-ancestor "$commit" "$tag_commit"; }; then
		version=$tag commit=$tag_commit
	fi
fi
if [[ -z $version ]]; then
	echo "last-release: no release is known: $record names no commit HEAD contains, and no v* tag is reachable from HEAD" >&2
	exit 2
fi
echo "$version $commit"
