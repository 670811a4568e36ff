#!/usr/bin/env bash
# `make bench`: every performance comparison of issue 9 in one run on one cluster, printed as
# one table (also written to _output/bench.txt):
#   - the loop's own overhead per tool round, event publishing and the input tokens stale
#     tool-result summaries and tool_search save (Go benchmarks);
#   - tool-call latency over the persistent exec stream, one exec per call and localenv, session
#     start cold and from the warm pool, and the subagent fan-out (the e2e specs labelled
#     "bench", which append their rows to $BENCH_OUT).
# Against $KUBECONFIG when it is set (images must be on the nodes), else the local cluster,
# which it brings up (and leaves up; `make cluster-down` ends it).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

GO="${GO:-go}"
out="${REPO_ROOT}/_output"
mkdir -p "$out"
rows="$(mktemp)"
trap 'rm -f "$rows"' EXIT

# bench_line PKG BENCH: runs one Go benchmark once (with -benchmem) and prints its result line.
bench_line() {
	"$GO" test -run '^$' -bench "^$2\$" -benchmem -benchtime "${BENCHTIME:-2s}" -count 1 "$1" | grep "^$2"
}
# metric LINE UNIT: the value a benchmark line reports in UNIT.
metric() { awk -v unit="$2" '{for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1)}' <<<"$1"; }

log "bench: Go benchmarks (loop, events)"
round="$(bench_line ./internal/loop BenchmarkToolRound)"
printf 'loop overhead per tool round (no-op tool, instant model)\t%s µs, %s allocs\t\n' \
	"$(awk -v n="$(metric "$round" ns/op)" 'BEGIN { printf "%.0f", n / 1000 }')" "$(metric "$round" allocs/op)" >>"$rows"
publish="$(bench_line ./internal/events BenchmarkPublish)"
printf 'events published with acknowledgements (embedded NATS, one publisher)\t%.0f events/s\t>= 10000 events/s\n' \
	"$(metric "$publish" events/s)" >>"$rows"
lag="$(bench_line ./internal/events BenchmarkFollowLag)"
printf 'publish -> subscriber receipt lag\tmedian %s µs, p99 %s µs\tp99 < 50 ms\n' \
	"$(metric "$lag" p50-µs)" "$(metric "$lag" p99-µs)" >>"$rows"

stale="$(BENCHTIME=1x bench_line ./internal/loop BenchmarkStaleToolResults)"
printf 'stale tool-result summaries: input tokens of a 60-turn session, off / on (issue 18)\t%s / %s (%sx fewer)\t>= 3x fewer\n' \
	"$(metric "$stale" input-tokens-off)" "$(metric "$stale" input-tokens-on)" "$(metric "$stale" x-fewer)" >>"$rows"

toolsearch="$(BENCHTIME=1x bench_line ./internal/loop 'BenchmarkToolSearchPromptTokens/tools=200')"
printf 'tool_search: input tokens of the first request with 200 MCP tools, all sent / deferred (issue 22)\t%s / %s (%sx fewer; one search round adds %s)\t>= 3x fewer\n' \
	"$(metric "$toolsearch" input-tokens-off)" "$(metric "$toolsearch" input-tokens-on)" "$(metric "$toolsearch" x-fewer)" \
	"$(metric "$toolsearch" search-round-tokens)" >>"$rows"

if [ -z "${KUBECONFIG:-}" ]; then
	"${MAKE:-make}" --no-print-directory cluster-up images
	export KUBECONFIG="${KUBECONFIG_PATH}"
fi
log "bench: e2e specs labelled bench against ${KUBECONFIG}"
BENCH_OUT="$rows" "$GO" test -tags e2e ./test/e2e/... -count=1 -timeout 60m -v \
	-ginkgo.label-filter=bench -ginkgo.no-color >"$out/bench-e2e.log" 2>&1 || {
	tail -n 60 "$out/bench-e2e.log"
	die "bench: the e2e bench specs failed (log: $out/bench-e2e.log)"
}

{
	echo "agent-operator benchmarks, $(date -u +%FT%TZ), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $("$GO" version | awk '{print $3}')"
	echo
	(
		printf 'measurement\tresult\ttarget\n'
		cat "$rows"
	) | awk -F '\t' '{ for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n = NR }
		END { for (r = 1; r <= n; r++) { line = ""; for (i = 1; i <= 3; i++) line = line sprintf("%-" w[i] + 2 "s", cell[r, i]); sub(/ +$/, "", line); print line } }'
} | tee "$out/bench.txt"
