#!/usr/bin/env bash
# stress.sh RUNS: run the whole suite RUNS times in a row while a CPU burner keeps twice the cores
# busy, and print each run's wall time and the passes of every test over the runs.
#
# `make test-stress` calls it inside scripts/with-postgres.sh, with SLUICE_TEMPORAL_CLI set and
# GO_TEST holding the go test command of `make test` (flags included). The burner is started and
# stopped here: it ends with the script, however the script ends. Each run's verbose output is kept
# in bin/stress/run-N.log. The exit code is non-zero if any run failed.
set -euo pipefail

runs=${1:-10}
if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
	echo "stress: RUNS must be a positive integer, got '$runs'" >&2
	exit 2
fi
: "${GO_TEST:?stress: GO_TEST must hold the go test command (make test-stress sets it)}"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=bin/stress
mkdir -p "$out"
rm -f "$out"/run-*.log

burners=()
stop_burners() {
	if ((${#burners[@]} > 0)); then
		kill "${burners[@]}" 2>/dev/null || true
		wait "${burners[@]}" 2>/dev/null || true
		burners=()
	fi
}
trap stop_burners EXIT
trap 'exit 130' INT TERM

cores=$(nproc)
for _ in $(seq $((2 * cores))); do
	bash -c 'while :; do :; done' &
	burners+=($!)
done
echo "stress: $runs runs of the suite under a CPU burner of $((2 * cores)) busy loops on $cores cores"

failed=0
for i in $(seq "$runs"); do
	log="$out/run-$i.log"
	start=$(date +%s)
	status=PASS
	# -v so that every test's result is in the log, top-level ones at the start of a line.
	$GO_TEST -v ./... >"$log" 2>&1 || status=FAIL
	secs=$(($(date +%s) - start))
	load=$(cut -d' ' -f1-3 /proc/loadavg)
	printf 'stress: run %d/%d: %s in %dm%02ds (load average %s)\n' "$i" "$runs" "$status" $((secs / 60)) $((secs % 60)) "$load"
	if [[ $status == FAIL ]]; then
		failed=$((failed + 1))
		grep -E '^(--- FAIL|FAIL|panic:)' "$log" | sed 's/^/stress:     /' || true
	fi
done
stop_burners

echo
echo "stress: passes per test over $runs runs (top-level tests; a test skipped in a run is not counted)"
# A top-level result line: "--- PASS: TestName (1.23s)", at the start of the line.
awk -v runs="$runs" '
	/^--- (PASS|FAIL): / {
		name = $3
		seen[name] = 1
		if ($2 == "PASS:") pass[name]++; else fail[name]++
	}
	END {
		for (n in seen) printf "%4d/%d  %s%s\n", pass[n], runs, n, (fail[n] ? sprintf("  (%d failed)", fail[n]) : "")
	}' "$out"/run-*.log | sort -k2
echo
echo "stress: $((runs - failed)) of $runs runs green; logs in $out/"
((failed == 0))
