#!/usr/bin/env bash
# `make bench`: every performance comparison in one run on one cluster, printed as one table of
# figure, result, target and previous result (also written to _output/bench.txt):
#   - the loop's own overhead per tool round, event publishing and the input tokens stale
#     tool-result summaries and tool_search save (Go benchmarks);
#   - tool-call latency over the persistent exec stream, one exec per call and localenv, session
#     start cold and from the warm pool (with the manager's start stages), the subagent fan-out
#     (one run per width of BENCH_FANOUT, a comma list, default 100), API writes per
#     session-minute, MCP calls, replicas, and the load spec's burst (the e2e specs labelled
#     "bench" or "load", which append their rows to $BENCH_OUT).
# The previous result of each figure comes from hack/bench-previous.tsv (figure<TAB>result, '#'
# comments; BENCH_PREVIOUS overrides the path). The run's own figure<TAB>result lines go to
# _output/bench.tsv: copy it over hack/bench-previous.tsv to make this run the next one's
# "previous".
# BENCH_TIMEOUT (default 120m) bounds the e2e run. Against $KUBECONFIG when it is set (images
# must be on the nodes), else the local cluster, which it brings up (and leaves up;
# `make cluster-down` ends it).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# bench_line PKG BENCH: runs one Go benchmark once (with -benchmem) and prints its result line.
bench_line() {
	"$GO" test -run '^$' -bench "^$2\$" -benchmem -benchtime "${BENCHTIME:-2s}" -count 1 "$1" | grep "^$2"
}
# metric LINE UNIT: the value a benchmark line reports in UNIT.
metric() { awk -v unit="$2" '{for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1)}' <<<"$1"; }

# bench_table ROWS PREVIOUS: prints the rows of ROWS (figure<TAB>result<TAB>target) as an
# aligned table with a fourth column, the figure's result in PREVIOUS (figure<TAB>result lines;
# blank lines and lines starting with # are skipped; "-" when the figure is not there). PREVIOUS
# may be missing.
bench_table() {
	local previous="$2"
	[ -f "$previous" ] || previous=/dev/null
	# Widths count characters, not bytes (µ is two): bytes in the C locale, less the UTF-8
	# continuation bytes.
	LC_ALL=C awk -F '\t' '
		FILENAME == ARGV[1] { if ($0 !~ /^#/ && $0 != "" && NF >= 2) prev[$1] = $2; next }
		FNR == 1 { add("figure", "result", "target", "previous") }
		{ add($1, $2, $3, ($1 in prev) ? prev[$1] : "-") }
		function width(s) { return length(s) - gsub(/[\200-\277]/, "", s) }
		function add(a, b, c, d) { n++; cell[n, 1] = a; cell[n, 2] = b; cell[n, 3] = c; cell[n, 4] = d
			for (i = 1; i <= 4; i++) if (width(cell[n, i]) > w[i]) w[i] = width(cell[n, i]) }
		END { for (r = 1; r <= n; r++) { line = ""
				for (i = 1; i <= 4; i++) { line = line cell[r, i]; for (k = width(cell[r, i]); k < w[i] + 2; k++) line = line " " }
				sub(/ +$/, "", line); print line } }' "$previous" "$1"
}

# bench_tsv ROWS HEADER: prints HEADER as a # comment, then figure<TAB>result of every row of
# ROWS: the format of hack/bench-previous.tsv.
bench_tsv() {
	printf '# %s\n' "$2"
	awk -F '\t' '$1 != "" { printf "%s\t%s\n", $1, $2 }' "$1"
}

# check_fanout VALUE: fails unless VALUE is a comma list of positive numbers (BENCH_FANOUT).
check_fanout() {
	[[ "$1" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
		die "bench: BENCH_FANOUT=$1: want a comma-separated list of numbers of children, such as 100,1000"
}

main() {
	cd "${REPO_ROOT}"
	GO="${GO:-go}"
	local out="${REPO_ROOT}/_output" previous="${BENCH_PREVIOUS:-${REPO_ROOT}/hack/bench-previous.tsv}" rows header
	export BENCH_FANOUT="${BENCH_FANOUT:-100}"
	check_fanout "$BENCH_FANOUT"
	mkdir -p "$out"
	rows="$(mktemp)"
	# shellcheck disable=SC2064 # expand now: rows is local
	trap "rm -f '$rows'" EXIT

	log "bench: Go benchmarks (loop, events)"
	local round publish lag stale toolsearch
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
	log "bench: e2e specs labelled bench or load against ${KUBECONFIG} (fan-out widths ${BENCH_FANOUT})"
	BENCH_OUT="$rows" "$GO" test -tags e2e ./test/e2e/... -count=1 -timeout "${BENCH_TIMEOUT:-120m}" -v \
		-ginkgo.label-filter='bench || load' -ginkgo.no-color >"$out/bench-e2e.log" 2>&1 || {
		tail -n 60 "$out/bench-e2e.log"
		die "bench: the e2e bench and load specs failed (log: $out/bench-e2e.log)"
	}

	header="agent-operator benchmarks, $(date -u +%FT%TZ), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $("$GO" version | awk '{print $3}')"
	bench_tsv "$rows" "$header" >"$out/bench.tsv"
	{
		echo "$header"
		echo "previous results: ${previous#"${REPO_ROOT}/"}$([ -f "$previous" ] || echo ' (missing)')"
		echo
		bench_table "$rows" "$previous"
	} | tee "$out/bench.txt"
	log "bench: this run's figure<TAB>result lines are in $out/bench.tsv (copy it over hack/bench-previous.tsv to keep them)"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	main "$@"
fi
