#!/usr/bin/env bash
# Builds a pinned Go tool into the cache and prints the binary's path:
#   hack/go-tool.sh NAME MODULE VERSION PACKAGE
#   -> ${AO_CACHE}/tools/NAME-VERSION/NAME
# `go install module/cmd/x@version` can get 403 from the module proxy's @v/list lookup, so this
# builds inside a scratch module with an explicit `require`. The tool's own non-local `replace`
# directives are copied, since replaces of a dependency are otherwise ignored.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
go_env_for_builds

[ $# -eq 4 ] || die "usage: $0 NAME MODULE VERSION PACKAGE"
name="$1" module="$2" version="$3" pkg="$4"
dir="${TOOLS_DIR}/${name}-${version}"
out="${dir}/${name}"
stamp="${module}@${version} ${pkg}"
if [ -x "$out" ] && [ -f "$dir/.complete" ] && [ "$(cat "$dir/.complete")" = "$stamp" ]; then
	echo "$out"
	exit 0
fi

lock "tool-${name}-${version}"
if [ -x "$out" ] && [ -f "$dir/.complete" ] && [ "$(cat "$dir/.complete")" = "$stamp" ]; then
	echo "$out" # built while we waited for the lock
	exit 0
fi
work="${AO_CACHE}/build/tool-${name}-${version}"
rm -rf "$work" && mkdir -p "$work" "$dir"
t0=$SECONDS
log "${name} ${version}: building ${pkg} (scratch module requiring ${module}@${version})"
printf 'module agent-operator.local/toolprobe\n' >"$work/go.mod"
upstream_mod="$(cd "$work" && go mod download -json "${module}@${version}" |
	sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[ -f "$upstream_mod" ] || die "${module}@${version} is not served by the module proxy"
godirective="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$upstream_mod" | head -n1)"
{
	echo "module agent-operator.local/tool-${name}"
	echo
	echo "go ${godirective:-1.26}"
	echo
	echo "require ${module} ${version}"
	# Non-local replaces, in both the block and the single-line form.
	awk '
		/^replace[[:space:]]*\($/ {b=1; next}
		b && /^\)/ {b=0; next}
		b {print "replace " $0; next}
		/^replace[[:space:]]/ {print}
	' "$upstream_mod" | grep -vE '=>[[:space:]]*\.{1,2}/' || true
} >"$work/go.mod"
(cd "$work" && go build -trimpath -ldflags "-s -w" -o "$out" "$pkg") >&2
echo "$stamp" >"$dir/.complete"
log "${name} ${version}: built in $((SECONDS - t0))s -> ${out}"
echo "$out"
