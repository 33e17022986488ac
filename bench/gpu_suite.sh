#!/usr/bin/env bash
# The GPU proof (issue 17) in phases that each fit one device command, in priority order.
#
#   bench/gpu_suite.sh wheels     HERE, once: the wheels the GPU image lacks (msgspec, optuna and its needs) into .whl/
#   bench/gpu_suite.sh plan       HERE or there: each phase's steps, their time limits and the device-time arithmetic
#   bench/gpu_suite.sh core       ON THE GPU: the `gpu` tests, cold tuning vs triton.autotune (32 and 64 configs)
#   bench/gpu_suite.sh quality    ON THE GPU: selection quality, cache-hit dispatch, determinism of cold tunings
#   bench/gpu_suite.sh search     ON THE GPU: the matmul landscape (>= 500 configs), model search vs random on it,
#                                 warm start from disk
#   bench/gpu_suite.sh compiled   ON THE GPU: examples/compiled_model.py under torch.compile(fullgraph=True) and
#                                 mode="reduce-overhead" (CUDA graphs), and a sweep over the local GPU
#   bench/gpu_suite.sh extra      ON THE GPU, if time is left: isolation and online benchmarks, the suite interpreted
#   bench/gpu_suite.sh recheck    ON THE GPU, after `core` in a task whose GPU ran every phase before: selection
#                                 quality, model search vs random live (needs that GPU's landscape), isolation
#
# A lent GPU comes with 15 minutes of device time per task, its start (a minute or two) included, and at most 10
# minutes per command. Each phase's steps fit PHASE_BUDGET_S (320 s; the setup before them, about 20 s, is not
# counted), so one task runs `core` and `quality` back to
# back: run(command="AUTOTUNE_BENCH_COMMIT=<git rev-parse --short HEAD> bash bench/gpu_suite.sh core",
# carry=[".whl"], timeout_s=360), then the same with `quality` right after it (the machine stays warm 30 s), then
# give_back; the next task with a GPU runs `search` and `compiled`, the one after `extra`. (Every phase ran once,
# on an H200 on 2026-11-29, and `core` and `recheck` on 2026-11-30; the next task with an H200 runs `core` and then
# `quality`. On another GPU, which has no landscape here, `search` records one first.)
# Every step writes its log and its JSON (renamed after the step) into bench/results/<gpu>/, and after every step
# that folder is packed into $OUT/<phase>.tar.gz (what comes back, even if a later step is cut off); unpack it
# here with `tar xzf <phase>.tar.gz -C bench/results/` and commit bench/results/<gpu>/. A step gets at most its
# own time limit and is skipped (and says so) when the phase's budget has no room for it.
set -u
cd "$(dirname "$0")/.."
PHASE="${1:-}"
PY="${PYTHON:-python3}"
PHASE_BUDGET_S="${PHASE_BUDGET_S:-320}"

if [ "$PHASE" = "wheels" ]; then   # into .whl.part first: a failed download (no index on the GPU machine) keeps .whl
    rm -rf .whl.part && mkdir -p .whl.part
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl.part \
        "msgspec>=0.18" "optuna>=3.4" alembic sqlalchemy mako colorlog \
        || { rm -rf .whl.part; echo "!! downloading the wheels failed: .whl is left as it was" >&2; exit 1; }
    rm -rf .whl && mv .whl.part .whl
    exit 0
fi
PHASES="core quality search compiled extra recheck"
XDIST=""
if "$PY" -c "import xdist" 2>/dev/null; then XDIST="-n 12 --dist loadfile"; fi
# Ten of bench_determinism's twenty shapes (M,N,K), one of each kind, so that two cold runs fit the phase: with ten
# keys its 95% target means all ten.
DETERMINISM_KEYS="512,512,512 4096,4096,4096 1000,1000,1000 16,4096,4096 256,4096,4096 8192,1024,1024 1024,1024,8192 3072,3072,768 2048,8192,2048 6144,1536,1536"

phase_steps() {   # phase_steps PHASE: its steps, most important first (`step NAME LIMIT_S COMMAND...`)
    case "$1" in
    core)
        step gpu_tests 130 "$PY" -m pytest -m gpu -q -p no:cacheprovider --timeout 90 --durations=10 tests/
        step cold_tuning 185 "$PY" bench/bench_cold_tuning.py --configs 32 64
        ;;
    quality)
        step selection_quality 90 "$PY" bench/bench_selection_quality.py --rounds 3 --rep-ms 15
        step dispatch 35 "$PY" bench/bench_dispatch.py --calls 3000 --rounds 3 --gpu-calls 500
        step determinism 190 "$PY" bench/bench_determinism.py --rounds 3 --rep-ms 10 --run-timeout-s 85 --keys $DETERMINISM_KEYS
        ;;
    search)
        step record_landscape 150 "$PY" bench/record_landscape.py --max-minutes 2.1
        step search_gpu 105 "$PY" bench/bench_search_gpu.py --seeds 2 --rounds 3 --replay
        step warm_start 60 "$PY" bench/bench_warm_start.py --runs 3
        ;;
    compiled)
        step compiled 240 "$PY" bench/bench_compiled.py --calls 50
        ;;
    extra)
        step isolation 105 "$PY" bench/bench_isolation.py
        step online 80 "$PY" bench/bench_online.py
        # The suite's CPU tests use CPU tensors, which a real GPU launch refuses: they run through the interpreter
        # here, the one run of the suite under the image's Python 3.12, torch 2.11 and Triton 3.6 (gpu tests skipped),
        # spread over 12 processes where pytest-xdist is installed (the image has it; one file stays on one process).
        step suite_interpreted 130 env TRITON_INTERPRET=1 "$PY" -m pytest -v -p no:cacheprovider $XDIST --timeout 100 \
            tests/ -k "not redis" --durations=5
        ;;
    recheck)
        step selection_quality 90 "$PY" bench/bench_selection_quality.py --rounds 3 --rep-ms 15
        step search_gpu 105 "$PY" bench/bench_search_gpu.py --seeds 2 --rounds 3 --replay
        step isolation 105 "$PY" bench/bench_isolation.py
        ;;
    esac
}

if [ "$PHASE" = "plan" ]; then   # what each phase runs and how long it may take, without running anything
    step() { printf '  %-18s %4s s  %s\n' "$1" "$2" "${*:3}"; PLANNED=$(( PLANNED + $2 )); }
    FITS=1
    for p in $PHASES; do
        PLANNED=0
        echo "$p:"
        phase_steps "$p"
        echo "  = ${PLANNED} s of steps in a budget of ${PHASE_BUDGET_S} s"
        if [ "$PLANNED" -gt "$PHASE_BUDGET_S" ]; then echo "!! phase $p does not fit PHASE_BUDGET_S"; FITS=0; fi
    done
    # Two phases back to back in one task: a start of up to 2 min, then each phase's setup (the wheels, two
    # imports of torch: about 20 s, outside the phase's budget) and its steps, in a command limit of budget + 40 s.
    TASK_S=$(( 120 + 2 * (PHASE_BUDGET_S + 40) ))
    if [ "$TASK_S" -le 900 ]; then
        echo "device time: core and quality, each run(..., timeout_s=$(( PHASE_BUDGET_S + 40 ))), and a start of up to 2 min"
        echo "take at most ${TASK_S} s of a task's 900; search and compiled go to the next task with a GPU, then extra."
    else
        echo "!! two phases of ${PHASE_BUDGET_S} s and a start (${TASK_S} s) do not fit a task's 900 s of device time"
        FITS=0
    fi
    [ "$FITS" = 1 ] && exit 0 || exit 1
fi
case "$PHASE" in core|quality|search|compiled|extra|recheck) ;; *) echo "usage: $0 wheels|plan|${PHASES// /|}" >&2; exit 2;; esac

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
if [ -z "$SLUG" ]; then
    echo "!! could not name the GPU (bench/record_landscape.py's gpu_slug): nothing to run"
    if [ -n "$PTH" ]; then rm -f "$PTH"; fi
    exit 1
fi
DEST="bench/results/${SLUG}"
LOGS="${DEST}/logs"
mkdir -p "$LOGS"

step() {   # step NAME LIMIT_S COMMAND...: run it with its log, unless the phase has no room left for LIMIT_S
    local name="$1" limit="$2"; shift 2
    local left=$(( PHASE_BUDGET_S - ($(date +%s) - STARTED) ))
    if [ "$left" -lt 0 ]; then left=0; fi
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

STARTED=$(date +%s)   # the phase's budget is its steps': the setup above (about 20 s) is outside it
phase_steps "$PHASE"
echo "phase ${PHASE} done in $(( $(date +%s) - STARTED )) s of steps"
