"""Record a brute-force landscape of kernels/matmul.py on this GPU, in kernel_tuner's cache format (issue 17).

Every config of a wide space (BLOCK_M/N 32..256, BLOCK_K 32..128, GROUP_M 1/8, num_warps 2/4/8, num_stages
2..5: 888 configs after one register rule, 8 to 128 fp32 accumulators per thread) at one shape (default
M = N = K = 4096, fp16), in a seeded random order so that a run stopped early is a uniform sample.
Shared memory is not guessed: a config that does not fit is left to Triton, whose OutOfResources when the
compiled binary is loaded is recorded as "RuntimeFailedConfig" (as kernel_tuner records a launch that asks too
many resources; our tuner meets it at the first run too); an exception inside Triton's compile is recorded as
"CompilationFailedConfig"; so is nothing else.

  compile_time   ms of a real compile: `_matmul_kernel.warmup(...)` (frontend, LLVM, ptxas; no launch) of the
                 config's first compile in this run's fresh TRITON_CACHE_DIR, in one of `--workers` compile
                 processes (spawned, niced, each warmed by a throwaway compile first, so no process start or
                 LLVM/CUDA initialisation is counted); several compile at once, as in the tuner's pool.
                 Interpreter: no compile exists; the first launch's wall time stands in.
  times          per-repetition ms, timed by the tuner's own timer (autotune.engine.timing.CudaEventTimer): CUDA events
                 around each launch, after `--warmup` untimed launches, with an untimed write of twice the L2
                 before each rep to flush it; reps are queued behind a GPU-side sleep so CPU work never shows
                 in them. `time` is their mean.
  load_time      ms of the measuring process's first launch (the binary read from the disk cache and loaded);
                 a load over 250 ms means it compiled again and is reported.
Each result is checked against torch (fp32 reference) before timing; a wrong one is "RuntimeFailedConfig".
The file is rewritten every 30 s and at the end (atomically), so a run killed at a time limit keeps its data;
`--max-minutes` stops it early on purpose. `autotune.reporting.replay.load_landscape` reads it.

    python bench/record_landscape.py [--out PATH] [--size 4096] [--max-minutes 8] [--workers N] [--interpret]

Without a CUDA GPU (or with --interpret) it runs a 64^3 shape and a 5-config space through Triton's interpreter
(wall clock, no flush), so that the code path is tested on a CPU.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import itertools
import json
import multiprocessing as mp
import os
import random
import re
import signal
import statistics
import sys
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

START = time.monotonic()
HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402

AXES_GPU: dict[str, list[int]] = {
    "BLOCK_M": [32, 64, 128, 256],
    "BLOCK_N": [32, 64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [1, 8],
    "num_warps": [2, 4, 8],
    "num_stages": [2, 3, 4, 5],
}  # kernels/matmul.py's WIDE_SPACE (a test checks)
# Interpreter: 8 in the product, 5 kept by the register rule (num_warps only matters to that rule there).
AXES_CPU: dict[str, list[int]] = {
    "BLOCK_M": [16, 32],
    "BLOCK_N": [16, 32],
    "BLOCK_K": [16],
    "GROUP_M": [2],
    "num_warps": [1, 4],
    "num_stages": [2],
}
MIN_ACC, MAX_ACC = 8, 128  # fp32 accumulators per thread: fewer wastes the warps, more spills
FAILED_COMPILE, FAILED_RUN = "CompilationFailedConfig", "RuntimeFailedConfig"
LOAD_RECOMPILED_MS = 250.0
ATOL, RTOL = 0.5, 0.05
WARMUP_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}


class DeviceLost(RuntimeError):
    """A launch poisoned the CUDA context: nothing more can be measured in this process."""


def keep(config: dict[str, int]) -> bool:
    """The space's one constraint: between MIN_ACC and MAX_ACC fp32 accumulators per thread."""
    per_thread = config["BLOCK_M"] * config["BLOCK_N"] / (32 * config["num_warps"])
    return MIN_ACC <= per_thread <= MAX_ACC


def space(axes: dict[str, list[int]]) -> list[dict[str, int]]:
    """The configs of the product of `axes` that `keep` accepts, in product order."""
    configs = (dict(zip(axes, values)) for values in itertools.product(*axes.values()))
    return [c for c in configs if keep(c)]


def config_id(config: dict[str, int], axes: dict[str, list[int]]) -> str:
    """kernel_tuner's cache key: the axis values joined by commas, in `tune_params` order."""
    return ",".join(str(config[name]) for name in axes)


def short_error(exc: BaseException) -> str:
    """The exception's type and the first 300 characters of its message, on one line."""
    return re.sub(r"\s+", " ", f"{type(exc).__name__}: {exc}")[:300]


def operands(shape: tuple[int, int, int], device: str) -> tuple[Any, Any, Any]:
    """a (M x K), b (K x N) random fp16 from seed 0, and c (M x N) for the product: the operands every matmul
    benchmark here launches on."""
    import torch

    M, N, K = shape
    torch.manual_seed(0)
    a = torch.randn((M, K), device=device, dtype=torch.float16)
    b = torch.randn((K, N), device=device, dtype=torch.float16)
    return a, b, torch.empty((M, N), device=device, dtype=torch.float16)


def launcher(a: Any, b: Any, c: Any, config: dict[str, int]) -> Callable[[], Any]:
    """A thunk launching kernels/matmul.py's kernel on c = a @ b with exactly `config` (bypassing tuning)."""
    from kernels.matmul import _matmul_kernel

    M, K = a.shape
    N = b.shape[1]
    grid = (-(-M // config["BLOCK_M"]) * -(-N // config["BLOCK_N"]),)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    kernel = _matmul_kernel[grid]
    return lambda: kernel(*args, **config)


def compile_config(config: dict[str, int], shape: tuple[int, int, int]) -> dict[str, Any]:
    """Compile `config` for contiguous fp16 operands of `shape` without launching; its ms, or how it failed."""
    import torch

    from kernels.matmul import _matmul_kernel

    M, N, K = shape
    f16 = torch.float16
    started = time.perf_counter()
    try:  # the same ints (strides included) as the real launch, so the measuring process hits the disk cache
        compiled = _matmul_kernel.warmup(f16, f16, f16, M, N, K, K, 1, N, 1, N, 1, grid=(1,), **config)
    except Exception as exc:  # noqa: BLE001 - a config's compile error is a data point
        return {
            "config": config,
            "status": FAILED_COMPILE,
            "failure": "compile_error",
            "compile_ms": (time.perf_counter() - started) * 1e3,
            "error": short_error(exc),
        }
    compile_ms = (time.perf_counter() - started) * 1e3
    try:
        init = getattr(compiled, "_init_handles", None)  # loads it: Triton's shared memory / threads checks
        if init is not None:
            init()
    except Exception as exc:  # noqa: BLE001
        kind = "out_of_resources" if type(exc).__name__ == "OutOfResources" else "load_error"
        return {
            "config": config,
            "status": FAILED_RUN,
            "failure": kind,
            "compile_ms": compile_ms,
            "error": short_error(exc),
        }
    return {"config": config, "status": "ok", "compile_ms": compile_ms}


def _worker_init() -> None:
    """Compile worker: below the measuring process in priority, and Triton's one-off start-up paid here."""
    try:
        os.nice(10)
    except OSError:
        pass
    common.prepare()
    compile_config(WARMUP_CONFIG, (17, 17, 17))  # 17: not a multiple of 16, a specialization never recorded


def _compile_task(task: tuple[dict[str, int], tuple[int, int, int]]) -> dict[str, Any]:
    """Pool entry point: one config's compile result."""
    return compile_config(*task)


def compile_results(
    configs: list[dict[str, int]], shape: tuple[int, int, int], workers: int, deadline: float, stall_s: float
) -> Generator[dict[str, Any], None, None]:
    """Compile results as they finish (in this process when workers == 0), until `deadline` (monotonic s) or
    until no result came for `stall_s` (a worker hung or died); the workers are killed on the way out."""
    if workers <= 0:
        for config in configs:
            if time.monotonic() >= deadline:
                return
            yield compile_config(config, shape)
        return
    pool = mp.get_context("spawn").Pool(workers, initializer=_worker_init)
    try:
        results = pool.imap_unordered(_compile_task, [(c, shape) for c in configs], chunksize=1)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                yield results.next(timeout=min(left, stall_s))
            except StopIteration:
                return
            except mp.TimeoutError:
                if left > stall_s:
                    print(f"!! no compile finished for {stall_s:.0f} s: stopping (a worker hung or died)", flush=True)
                    return
    finally:
        pool.terminate()
        pool.join()


def measure_entry(
    compiled: dict[str, Any],
    launch: Callable[[], Any],
    check: Callable[[], str | None],
    time_reps: Callable[[Callable[[], Any]], list[float]],
    interpret: bool,
) -> dict[str, Any]:
    """One config's cache entry in kernel_tuner's format, from its compile result and its measurement
    (`time_reps(launch)`: per-rep ms)."""
    config = compiled["config"]
    entry: dict[str, Any] = {
        **config,
        "time": None,
        "times": [],
        "compile_time": compiled["compile_ms"],
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(),
    }
    if compiled["status"] != "ok":
        entry.update(time=compiled["status"], failure=compiled["failure"], error=compiled["error"])
        return entry
    from autotune.errors import FailureKind, classify

    try:
        started = time.perf_counter()
        launch()
        if not interpret:
            import torch

            torch.cuda.synchronize()
        entry["load_time"] = (time.perf_counter() - started) * 1e3
        if interpret:
            entry["compile_time"] = entry["load_time"]
        started = time.perf_counter()
        problem = check()
        entry["verification_time"] = (time.perf_counter() - started) * 1e3
        if problem is not None:
            entry.update(time=FAILED_RUN, failure="wrong_result", error=problem)
            return entry
        started = time.perf_counter()
        times = time_reps(launch)
        entry["benchmark_time"] = (time.perf_counter() - started) * 1e3
    except Exception as exc:  # noqa: BLE001 - a config's launch error is a data point, unless the device died
        kind = classify(exc, "run")
        if kind is FailureKind.STICKY_DEVICE:
            raise DeviceLost(f"{config}: {short_error(exc)}") from exc
        failure = "out_of_resources" if kind is FailureKind.OUT_OF_RESOURCES else "launch_error"
        entry.update(time=FAILED_RUN, failure=failure, error=short_error(exc))
        return entry
    entry.update(time=statistics.fmean(times), times=times)
    return entry


def make_check(c: Any, ref: Any) -> Callable[[], str | None]:
    """A check of `c` against the fp32 reference `ref` (NaN counts as wrong); None when right."""

    def check() -> str | None:
        diff = (c.float() - ref).abs()
        bad = int((~(diff <= ATOL + RTOL * ref.abs())).sum().item())
        return None if bad == 0 else f"wrong result: {bad} of {c.numel()} elements off (atol {ATOL}, rtol {RTOL})"

    return check


def gpu_slug(name: str) -> str:
    """A folder name for a device: 'NVIDIA H100 80GB HBM3' -> 'h100_80gb_hbm3'."""
    name = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "gpu"


def write_landscape(path: Path, doc: dict[str, Any]) -> None:
    """Write `doc` as gzip JSON, atomically (a hidden temporary file in the same folder, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump(doc, fh, separators=(",", ":"))
    os.replace(tmp, path)


def summary_lines(
    cache: dict[str, dict[str, Any]], planned: int, axes: dict[str, list[int]], interpret: bool
) -> list[str]:
    """Counts, failures by kind, compile times, suspected recompiles and the five fastest configs."""
    ok = {k: e for k, e in cache.items() if isinstance(e["time"], (int, float))}
    failures: dict[str, int] = {}
    for entry in cache.values():
        if not isinstance(entry["time"], (int, float)):
            key = f"{entry['time']}/{entry.get('failure')}"
            failures[key] = failures.get(key, 0) + 1
    compiles = [e["compile_time"] for e in cache.values() if e.get("compile_time")]
    # the first config launched also pays the process's first launch (the driver's and the context's setup)
    first = next((k for k, e in cache.items() if "load_time" in e), None)
    loaded = [e for k, e in ok.items() if k != first]
    reloads = 0 if interpret else sum(1 for e in loaded if e.get("load_time", 0.0) > LOAD_RECOMPILED_MS)
    lines = [f"recorded {len(cache)} of {planned} configs: {len(ok)} ran, failed {failures or 'none'}"]
    if compiles:
        lines.append(
            f"compile ms: median {statistics.median(compiles):.0f}, max {max(compiles):.0f}, "
            f"total {sum(compiles) / 1e3:.1f} s"
        )
    if reloads:
        lines.append(
            f"!! {reloads} configs took over {LOAD_RECOMPILED_MS:.0f} ms to load in the measuring process: "
            "they were compiled again there (the workers' cache entries did not match)"
        )
    best = sorted(ok.items(), key=lambda kv: kv[1]["time"])[:5]
    if best:
        rows = [[k, e["time"] * 1e3, min(e["times"]) * 1e3, max(e["times"]) * 1e3, e["compile_time"]] for k, e in best]
        lines.append(common.table([f"config ({','.join(axes)})", "mean us", "min us", "max us", "compile ms"], rows))
    return lines


def main() -> int:
    """Parse the options, record the landscape, write it; 0 when done (also when stopped by the deadline)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=None, help="gzip JSON path (default bench/results/<gpu>/matmul_landscape.json.gz)"
    )
    parser.add_argument(
        "--size", type=int, nargs="+", default=None, help="M = N = K, or M N K (default 4096; 64 in the interpreter)"
    )
    parser.add_argument("--max-minutes", type=float, default=8.0, help="stop measuring after this, write what is done")
    parser.add_argument("--workers", type=int, default=None, help="compile processes (0: compile in this process)")
    parser.add_argument(
        "--warmup", type=int, default=None, help="untimed launches before the reps (5; 1 in interpreter)"
    )
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions per config (25; 5 in interpreter)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N configs of the shuffled order")
    parser.add_argument("--seed", type=int, default=0, help="seed of the config order")
    parser.add_argument("--stall-s", type=float, default=120.0, help="give up when no compile finishes for this long")
    parser.add_argument("--interpret", action="store_true", help="Triton's CPU interpreter, tiny shape and space")
    args = parser.parse_args()
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    gpu = common.prepare()
    os.environ["TRITON_CACHE_DIR"] = common.scratch_dir("landscape-triton-")  # before triton is imported
    import torch

    from autotune.engine.timing import make_timer
    from kernels.matmul import matmul_reference

    interpret = not gpu
    size = args.size or ([4096] if gpu else [64])
    shape = (size[0], size[0], size[0]) if len(size) == 1 else tuple(size[:3])
    M, N, K = shape
    axes = AXES_GPU if gpu else AXES_CPU
    workers = args.workers if args.workers is not None else (min(12, max(1, (os.cpu_count() or 2) - 4)) if gpu else 0)
    warmup = args.warmup if args.warmup is not None else (5 if gpu else 1)
    reps = args.reps if args.reps is not None else (25 if gpu else 5)
    device = torch.cuda.get_device_name() if gpu else "CPU via TRITON_INTERPRET=1"
    out = args.out or common.RESULTS / (gpu_slug(device) if gpu else "cpu_interpreter") / "matmul_landscape.json.gz"
    configs = space(axes)
    random.Random(args.seed).shuffle(configs)
    configs = configs[: args.limit] if args.limit else configs
    deadline = START + args.max_minutes * 60.0

    a, b, c = operands(shape, "cuda" if gpu else "cpu")
    ref = matmul_reference(a, b).float()
    timer = make_timer(on_gpu=gpu)  # the tuner's own: CUDA events, 2x-L2 flush, reps queued behind a GPU sleep

    def time_reps(fn: Callable[[], Any]) -> list[float]:
        return timer.measure(fn, warmup=warmup, reps=reps)

    check = make_check(c, ref)
    cache: dict[str, dict[str, Any]] = {}
    meta: dict[str, Any] = {
        "script": "bench/record_landscape.py",
        "kernel": "kernels/matmul.py::_matmul_kernel",
        "dtype": "float16",
        "interpret": interpret,
        "device": common.device_name(),
        "versions": common.versions(),
        "commit": common.git_commit(),
        "workers": workers,
        "warmup": warmup,
        "reps": reps,
        "l2_flush": "a buffer of twice the L2 zeroed before each rep" if gpu else "none",
        "order_seed": args.seed,
        "planned": len(configs),
        "constraint": f"{MIN_ACC} <= BLOCK_M*BLOCK_N/(32*num_warps) <= {MAX_ACC}",
        "compile_time": "interpreter: first launch wall ms"
        if interpret
        else f"ms of _matmul_kernel.warmup (a real compile, fresh TRITON_CACHE_DIR), {workers} compile "
        "processes at once",
        "times": "wall ms per rep"
        if interpret
        else "CUDA-event ms per rep (autotune.engine.timing.CudaEventTimer): L2 "
        "flushed before each, reps queued behind a GPU-side sleep",
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }

    def document(complete: bool) -> dict[str, Any]:
        meta.update(complete=complete, recorded=len(cache), elapsed_s=round(time.monotonic() - START, 1))
        return {
            "device_name": device,
            "kernel_name": "matmul",
            "problem_size": list(shape),
            "tune_params_keys": list(axes),
            "tune_params": axes,
            "objective": "time",
            "autotune_recorder": meta,
            "cache": cache,  # last: kernel_tuner's read_cache takes a file not ending in the cache as cut short
        }

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    print(
        f"recording {len(configs)} configs of matmul {M}x{N}x{K} fp16 on {device}; {workers} compile workers, "
        f"{warmup} warmup + {reps} reps, stop after {args.max_minutes} min -> {out}",
        flush=True,
    )
    complete, status, last_write, last_print = False, 0, time.monotonic(), time.monotonic()
    results = compile_results(configs, shape, workers, deadline, args.stall_s)
    try:
        for compiled in results:
            c.fill_(float("nan"))
            entry = measure_entry(compiled, launcher(a, b, c, compiled["config"]), check, time_reps, interpret)
            cache[config_id(compiled["config"], axes)] = entry
            now = time.monotonic()
            if now - last_print >= 10 or len(cache) == len(configs):
                times = [e["time"] for e in cache.values() if isinstance(e["time"], float)]
                print(
                    f"[{len(cache):4d}/{len(configs)}] {now - START:6.1f} s  ran {len(times)}, failed "
                    f"{len(cache) - len(times)}, best {min(times, default=float('nan')) * 1e3:.1f} us",
                    flush=True,
                )
                last_print = now
            if now - last_write >= 30:
                write_landscape(out, document(False))
                last_write = now
        complete = len(cache) == len(configs)
    except DeviceLost as exc:
        print(f"!! the device was lost, stopping: {exc}", flush=True)
        status = 3
    except (KeyboardInterrupt, SystemExit) as exc:
        print(f"!! interrupted ({exc}); writing what is recorded", flush=True)
        status = 130
    finally:
        results.close()
        if cache:
            write_landscape(out, document(complete))
    if not cache:
        print("nothing recorded", flush=True)
        return status or 1
    print(
        f"\n{'complete' if complete else 'INCOMPLETE (time limit or stall)'}: wrote {out} "
        f"after {time.monotonic() - START:.0f} s",
        flush=True,
    )
    for line in summary_lines(cache, len(configs), axes, interpret):
        print(line, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
