#!/usr/bin/env bash
# The GPU proof (issue 17) in phases that each fit one device command (under 10 minutes), in priority order.
#
#   bench/gpu_suite.sh wheels     HERE, once: the wheels the GPU image lacks (msgspec, optuna and its needs) into .whl/
#   bench/gpu_suite.sh core       ON THE GPU: the `gpu` tests, cold tuning vs triton.autotune (32 and 64 configs)
#   bench/gpu_suite.sh quality    ON THE GPU: selection quality, cache-hit dispatch, determinism of cold tunings
#   bench/gpu_suite.sh search     ON THE GPU: the matmul landscape (>= 500 configs), model search vs random on it,
#                                 warm start from disk
#   bench/gpu_suite.sh extra      ON THE GPU, if time is left: isolation and online benchmarks
#
# With the device tool: run(command="AUTOTUNE_BENCH_COMMIT=<git rev-parse --short HEAD> bash bench/gpu_suite.sh core",
# carry=[".whl"], timeout_s=600), then quality, then search, each called right after the last (the machine stays
# warm 30 s): three phases of at most PHASE_BUDGET_S (450 s) and the machine's start fit the 30 device minutes.
# Every step writes its log and its JSON (renamed after the step) into bench/results/<gpu>/, and after every step
# that folder is packed into $OUT/<phase>.tar.gz (what comes back, even if a later step is cut off); unpack it
# here with `tar xzf <phase>.tar.gz -C bench/results/` and commit bench/results/<gpu>/. A step gets at most its
# own time limit and is skipped (and says so) when the phase's budget has no room for it.
set -u
cd "$(dirname "$0")/.."
PHASE="${1:-}"
PY="${PYTHON:-python3}"
PHASE_BUDGET_S="${PHASE_BUDGET_S:-450}"
STARTED=$(date +%s)

if [ "$PHASE" = "wheels" ]; then
    rm -rf .whl && mkdir -p .whl
    exec "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
        "msgspec>=0.18" "optuna>=3.4" alembic sqlalchemy mako colorlog
fi
case "$PHASE" in core|quality|search|extra) ;; *) echo "usage: $0 wheels|core|quality|search|extra" >&2; exit 2;; esac

# The GPU image has torch, triton, filelock, tqdm, numpy, pytest and matplotlib; the rest travels as wheels.
SITE_DIR="$PWD/.gpu-suite-site"   # private to this checkout (a shared /tmp path could be planted by another user)
PTH=""
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE_DIR" \
        .whl/*.whl || { echo "!! installing the carried wheels failed"; exit 1; }
    export PYTHONPATH="$SITE_DIR:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    # Child processes that set their own PYTHONPATH (tests start workers with the checkout only) still need
    # msgspec: on the lent machine (a throwaway image, where $OUT is set) a .pth file in the interpreter's
    # site-packages puts the wheels on every sys.path until this script exits; never in anyone's own Python.
    if [ -n "${OUT:-}" ]; then
        if site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
                && echo "$SITE_DIR" > "${site}/autotune-gpu-suite-wheels.pth"; then
            PTH="${site}/autotune-gpu-suite-wheels.pth"
        else
            echo "!! cannot write a .pth into the interpreter's site-packages: child processes may miss msgspec"
        fi
    fi
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 AUTOTUNE_PROGRESS=0
unset TRITON_INTERPRET

SLUG=$("$PY" - <<'EOF'
import sys, torch
sys.path.insert(0, "bench")
from record_landscape import gpu_slug   # the one slug rule: record_landscape writes its default there too
print(gpu_slug(torch.cuda.get_device_name()) if torch.cuda.is_available() else "no_gpu")
EOF
)
DEST="bench/results/${SLUG}"
LOGS="${DEST}/logs"
mkdir -p "$LOGS"

step() {   # step NAME LIMIT_S COMMAND...: run it with its log, unless the phase has no room left for LIMIT_S
    local name="$1" limit="$2"; shift 2
    local left=$(( PHASE_BUDGET_S - ($(date +%s) - STARTED) ))
    if [ "$left" -lt "$limit" ]; then
        echo "== ${name}: skipped, ${left} s left in the phase and it may take ${limit} s" | tee -a "${LOGS}/${PHASE}.log"
        return 0
    fi
    echo "== ${name} (limit ${limit} s)" | tee -a "${LOGS}/${PHASE}.log"
    rm -f bench/results/*.json
    local t0=$(date +%s) rc=0
    timeout --kill-after=10 "$limit" "$@" > "${LOGS}/${name}.log" 2>&1 || rc=$?
    tail -n 40 "${LOGS}/${name}.log"
    echo "-- ${name}: rc ${rc}, $(( $(date +%s) - t0 )) s" | tee -a "${LOGS}/${PHASE}.log"
    for json in bench/results/*.json; do      # bench_X.json -> <step name>.json beside the log
        [ -f "$json" ] && mv "$json" "${DEST}/${name}.json"
    done
    collect
}

collect() {   # the folder so far, packed where it comes back from
    if [ -n "${OUT:-}" ]; then
        tar czf "${OUT}/${PHASE}.tar.gz" -C bench/results "$SLUG"
    fi
}
on_exit() {
    collect
    if [ -n "$PTH" ]; then rm -f "$PTH"; fi
}
trap on_exit EXIT

{
    date -u +"%Y-%m-%dT%H:%M:%SZ phase ${PHASE}"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 || true
    "$PY" -c 'import sys, torch, triton, autotune, msgspec; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda, "autotune from", autotune.__file__)'
    "$PY" -c 'import optuna; print("optuna", optuna.__version__)' 2>&1 | tail -1
    echo "commit ${AUTOTUNE_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
} 2>&1 | tee "${LOGS}/env-${PHASE}.log"

case "$PHASE" in
core)
    step gpu_tests 200 "$PY" -m pytest -m gpu -q -p no:cacheprovider --timeout 150 --durations=10 tests/
    step cold_tuning_32 100 "$PY" bench/bench_cold_tuning.py --configs 32
    step cold_tuning_64 170 "$PY" bench/bench_cold_tuning.py --configs 64
    ;;
quality)
    step selection_quality 150 "$PY" bench/bench_selection_quality.py --rounds 3 --rep-ms 20
    step dispatch 45 "$PY" bench/bench_dispatch.py --calls 5000 --rounds 5 --gpu-calls 1000
    step determinism 240 "$PY" bench/bench_determinism.py --rounds 6 --rep-ms 15 --run-timeout-s 100
    ;;
search)
    step record_landscape 240 "$PY" bench/record_landscape.py --max-minutes 3.7
    step search_gpu 125 "$PY" bench/bench_search_gpu.py --seeds 2 --rounds 3 --replay
    step warm_start 75 "$PY" bench/bench_warm_start.py --runs 3
    ;;
extra)
    step isolation 150 "$PY" bench/bench_isolation.py
    step online 120 "$PY" bench/bench_online.py
    # The suite's CPU tests use CPU tensors, which a real GPU launch refuses: they run through the interpreter here,
    # the one run of the whole suite under the image's Python 3.12, torch 2.11 and Triton 3.6 (gpu tests skipped).
    step suite_interpreted 230 env TRITON_INTERPRET=1 "$PY" -m pytest -v -p no:cacheprovider --timeout 120 tests/ \
        -k "not redis" --durations=5
    ;;
esac
echo "phase ${PHASE} done in $(( $(date +%s) - STARTED )) s"
