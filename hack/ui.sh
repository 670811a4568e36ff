#!/usr/bin/env bash
# Builds the console frontend (web/console) into cmd/kubectl-agent/ui/dist, which
# kubectl-agent embeds: npm ci from the committed package-lock.json (npm's cache in
# ${AO_CACHE}/npm), the Vitest tests, then the type check and `vite build`.
#   hack/ui.sh            install, test, build
#   hack/ui.sh test       install, test
#   hack/ui.sh build      install, build (no tests)
# Non-interactive; CI=true is fine. Needs Node.js >= 20.19 and npm (the machine's).
# The install is skipped when node_modules was installed from the same lock file;
# UI_FORCE_INSTALL=1 forces it.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

what="${1:-all}"
case "$what" in all | test | build) ;; *) die "usage: $0 [all|test|build]" ;; esac

UI_DIR="${REPO_ROOT}/web/console"
OUT_DIR="${REPO_ROOT}/cmd/kubectl-agent/ui/dist"
NPM_TIMEOUT="${UI_NPM_TIMEOUT:-600}"

command -v node >/dev/null 2>&1 || die "node not found: install Node.js >= 20.19 (with npm)"
command -v npm >/dev/null 2>&1 || die "npm not found: install npm with Node.js"
node -e '
const [a, b] = process.versions.node.split(".").map(Number);
if (a < 20 || (a === 20 && b < 19)) { console.error(`Node.js ${process.versions.node}: vite 8 needs >= 20.19`); process.exit(1); }
' || die "Node.js too old"

export npm_config_cache="${AO_CACHE}/npm"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export npm_config_progress=false npm_config_loglevel="${npm_config_loglevel:-warn}"
mkdir -p "$npm_config_cache"

cd "$UI_DIR"
lock "ui"

# install runs npm ci unless node_modules came from this very lock file.
install() {
	local want stamp=node_modules/.ao-lock-sha256
	want="$(sha256sum package-lock.json | cut -d' ' -f1) node-$(node -v)"
	if [ -z "${UI_FORCE_INSTALL:-}" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
		log "ui: node_modules matches package-lock.json (npm ci skipped)"
		return 0
	fi
	local attempt t0=$SECONDS
	for attempt in 1 2; do
		log "ui: npm ci (attempt ${attempt}, timeout ${NPM_TIMEOUT}s, cache ${npm_config_cache})"
		if timeout --kill-after=10 "$NPM_TIMEOUT" npm ci --prefer-offline --no-audit --no-fund </dev/null; then
			echo "$want" >"$stamp"
			log "ui: npm ci done in $((SECONDS - t0))s"
			return 0
		fi
		[ "$attempt" -eq 1 ] && log "ui: npm ci failed; retrying once" && sleep 5
	done
	die "ui: npm ci failed twice"
}

install

if [ "$what" != build ]; then
	log "ui: tests (vitest)"
	npm test --silent </dev/null
fi

if [ "$what" != test ]; then
	log "ui: type check and vite build -> ${OUT_DIR#"${REPO_ROOT}/"}"
	npm run build --silent </dev/null
	[ -f "${OUT_DIR}/index.html" ] || die "ui: ${OUT_DIR}/index.html was not built"
	# vite empties the directory: put back the committed placeholder that keeps
	# kubectl-agent's go:embed pattern valid on a clone without node.
	: >"${OUT_DIR}/.gitkeep"
	(cd "$OUT_DIR" && find . -type f -printf '%10s  %p\n' | sort -k2)
fi
