#!/usr/bin/env bash
# Fails when the generated code is stale: runs `make generate manifests` and compares the
# working tree (tracked changes and untracked files, by content) before and after.
# A no-op until api/ exists.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

if [ ! -d api ]; then
	echo "verify-gen: no api/ yet, nothing to verify"
	exit 0
fi
for t in generate manifests; do
	make -n "$t" >/dev/null 2>&1 || { echo "verify-gen: no '$t' make target yet, nothing to verify"; exit 0; }
done

snapshot() {
	git status --porcelain --untracked-files=all
	git diff --binary HEAD 2>/dev/null | sha256sum
	git ls-files --others --exclude-standard -z | xargs -0 -r sha256sum
}
before="$(snapshot)"
make --no-print-directory generate manifests
after="$(snapshot)"
if [ "$before" != "$after" ]; then
	echo "verify-gen: 'make generate manifests' changed the tree; commit the regenerated files:" >&2
	diff <(echo "$before") <(echo "$after") >&2 || true
	git status --porcelain --untracked-files=all >&2
	exit 1
fi
echo "verify-gen: generated code is up to date"
