#!/usr/bin/env bash
# `make bench`: every performance comparison of issue 9 in one run on one cluster, printed as
# one table (also written to _output/bench.txt):
#   - the loop's own overhead per tool round and event publishing (Go benchmarks);
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

# bench_metric PKG BENCH UNIT: runs one Go benchmark and prints the value of UNIT.
bench_metric() {
	local pkg="$1" bench="$2" unit="$3" line
	line="$("$GO" test -run '^$' -bench "^${bench}\$" -benchtime "${BENCHTIME:-2s}" -count 1 "$pkg" | grep "^${bench}")"
	awk -v unit="$unit" '{for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1)}' <<<"$line"
}

log "bench: Go benchmarks (loop, events)"
round_ns="$(bench_metric ./internal/loop BenchmarkToolRound ns/op)"
allocs="$(bench_metric ./internal/loop BenchmarkToolRound allocs/op || true)"
printf 'loop overhead per tool round (no-op tool, instant model)\t%s µs%s\t\n' \
	"$(awk -v n="$round_ns" 'BEGIN { printf "%.0f", n / 1000 }')" "${allocs:+, $allocs allocs}" >>"$rows"
eps="$(bench_metric ./internal/events BenchmarkPublish events/s)"
printf 'events published with acknowledgements (embedded NATS, one publisher)\t%.0f events/s\t>= 10000 events/s\n' "$eps" >>"$rows"
lag_line="$("$GO" test -run '^$' -bench '^BenchmarkFollowLag$' -benchtime "${BENCHTIME:-2s}" -count 1 ./internal/events | grep '^BenchmarkFollowLag')"
p50="$(awk '{for (i = 2; i <= NF; i++) if ($i == "p50-µs") print $(i-1)}' <<<"$lag_line")"
p99="$(awk '{for (i = 2; i <= NF; i++) if ($i == "p99-µs") print $(i-1)}' <<<"$lag_line")"
printf 'publish -> subscriber receipt lag\tmedian %s µs, p99 %s µs\tp99 < 50 ms\n' "$p50" "$p99" >>"$rows"

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
