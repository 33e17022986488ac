#!/usr/bin/env bash
# Run every benchmark in turn; each prints its table and writes bench/results/<name>.json.
# GPU-only benchmarks print "needs a CUDA GPU; skipped" and exit 0 on a machine without one.
# Usage: bench/run_all.sh   (PYTHON=... to pick the interpreter; run a benchmark by hand for its options)
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
status=0
for bench in bench_dispatch bench_warm_start bench_cold_tuning bench_selection_quality bench_precompile bench_remote_cache bench_search_replay bench_online bench_isolation bench_determinism bench_search_gpu; do
    script="bench/${bench}.py"
    if [ ! -f "$script" ]; then
        echo "== ${bench}: not present, skipped"
        continue
    fi
    echo "== ${bench}"
    start=$(date +%s)
    if ! "$PY" "$script"; then
        echo "!! ${bench} failed"
        status=1
    fi
    echo "-- ${bench}: $(( $(date +%s) - start )) s"
    echo
done
exit $status
