"""Cold tuning wall time for the matmul kernel over 32 and 64 configs (GPU only).

Variants, each in its own process with a fresh Triton cache dir (TRITON_CACHE_DIR, so every compile is
real) and a fresh autotune cache dir, measured in one run of this script:

  pipeline   this project, compile pool (Tuning().compile_workers workers) feeding the measurement
  serial     this project, compile_workers=0 (compile, measure, compile, measure, ...)
  triton     triton.autotune over the same configs (its defaults: compile on first bench, do_bench)

The time is from the first call (which tunes) to the end of its launch, synchronised. For the
pipeline the script also computes the bound the pipeline could reach,
max(total compile time / workers, total measure time), in two ways:
  * from the record's trials, as the brief defines it: sum(compile_s) / workers vs sum(samples);
  * instrumented: each compile timed on its pool thread (a wrapped executor), each config's
    measurement (and the refinement) timed on the calling thread.
and reports pipeline wall / bound.

Targets: pipeline wall at most half of triton.autotune's on 64 configs; pipeline within 15% of the bound.

    python bench/bench_cold_tuning.py [--configs 32 64] [--size 2048] [--repeat 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402

VARIANTS = ("pipeline", "serial", "triton")


def spread(items: list, n: int) -> list:
    """`n` items taken evenly across `items` (all of them when n >= len(items))."""
    if n >= len(items):
        return list(items)
    return [items[(i * len(items)) // n] for i in range(n)]


class TimingExecutor(Executor):
    """Wraps the pipeline's executor: times every function on the thread that runs it (Triton submits its
    compiles here through AsyncCompileMode), and forwards the future (with its start-time bookkeeping)."""

    def __init__(self, inner: Executor, durations: list[float]) -> None:
        self.inner = inner
        self.durations = durations
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        def timed() -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.durations.append(time.perf_counter() - start)

        return self.inner.submit(timed)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait=wait, cancel_futures=cancel_futures)


class TimedCompiler:
    """A Compiler (autotune.engine.pipeline protocol) around another that records each compile's own duration."""

    def __init__(self, inner: Any, durations: list[float]) -> None:
        self.inner = inner
        self.durations = durations
        self.submit_s = 0.0  # calling-thread time spent submitting (JIT binding, cache-key hashing)
        self.session_enter_s = 0.0  # calling-thread time entering the compile session
        self._executor: Executor | None = None

    @contextlib.contextmanager
    def session(self, executor: Executor) -> Iterator[Any]:
        self._executor = TimingExecutor(executor, self.durations)
        start = time.perf_counter()
        with self.inner.session(self._executor) as mode:
            self.session_enter_s += time.perf_counter() - start  # e.g. waiting for Triton's compiler hash
            yield mode

    def submit(self, config: Any, executor: Executor) -> Future:
        start = time.perf_counter()
        try:
            return self.inner.submit(config, self._executor or executor)
        finally:
            self.submit_s += time.perf_counter() - start

    def finalize(self, config: Any, result: Any) -> Any:
        return self.inner.finalize(config, result)


def instrument_measurement(durations: list[float]) -> bool:
    """Time autotune.engine.tuner's per-config measurement (`_settle`: the runner measures each compiled config) and
    the refinement on the calling thread (True if both are hooked; a test checks they still exist)."""
    import autotune.engine.tuner as tuner

    names = ("_settle", "_refine")
    if not all(callable(getattr(tuner, name, None)) for name in names):
        return False
    for name in names:
        original = getattr(tuner, name)

        def timed(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                durations.append(time.perf_counter() - start)

        setattr(tuner, name, timed)
    return True


def child(variant: str, n_configs: int, size: int) -> None:
    """One timed cold tuning in this (fresh) process; prints a RESULT line with the timings as JSON."""
    common.prepare()
    import torch
    import triton

    from kernels.matmul import SPACE, _matmul_kernel, make_matmul

    configs = spread(SPACE.configs(), n_configs)
    M = N = K = size
    a = torch.randn((M, K), device="cuda", dtype=torch.float16)
    b = torch.randn((K, N), device="cuda", dtype=torch.float16)
    c = torch.empty((M, N), device="cuda", dtype=torch.float16)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    torch.matmul(a, b)  # CUDA context, cuBLAS handle: not part of tuning
    torch.cuda.synchronize()
    out: dict[str, Any] = {"variant": variant, "configs": len(configs), "size": size}

    if variant == "triton":
        meta_names = [k for k in configs[0] if k not in ("num_warps", "num_stages")]
        tri_configs = [
            triton.Config({k: cfg[k] for k in meta_names}, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
            for cfg in configs
        ]
        kernel = triton.autotune(configs=tri_configs, key=["M", "N", "K"])(_matmul_kernel)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
        start = time.perf_counter()
        kernel[grid](*args)
        torch.cuda.synchronize()
        out["wall_s"] = time.perf_counter() - start
        out["bench_time_s"] = getattr(kernel, "bench_time", None)
    else:
        from autotune import FixedSpace, Tuning
        from autotune.engine.compilers import JitCompiler

        # In-process, as triton.autotune (the isolation overhead is bench_isolation.py's subject).
        tuning = Tuning(isolate="off") if variant == "pipeline" else Tuning(compile_workers=0, isolate="off")
        kernel = make_matmul(space=FixedSpace(configs), tuning=tuning)
        compile_durations: list[float] = []
        measure_durations: list[float] = []
        compilers: list[TimedCompiler] = []

        def timed_compiler(tuned: Any, prepare: Callable[[Any], tuple]) -> TimedCompiler:
            compilers.append(TimedCompiler(JitCompiler(tuned.fn, prepare), compile_durations))
            return compilers[-1]

        kernel.compiler_factory = timed_compiler
        hooked = instrument_measurement(measure_durations)
        start = time.perf_counter()
        kernel(*args)
        torch.cuda.synchronize()
        out["wall_s"] = time.perf_counter() - start
        record = kernel.record()
        workers = max(1, tuning.compile_workers)
        out.update(
            workers=tuning.compile_workers,
            tuning_s=record.tuning_s,
            ok=sum(1 for t in record.trials if t.ok),
            record_compile_s=sum(t.compile_s or 0.0 for t in record.trials),
            record_measure_s=sum(sum(t.samples_ms) for t in record.trials) / 1e3,
            instr_compile_s=sum(compile_durations),
            instr_compiles=len(compile_durations),
            instr_measure_s=sum(measure_durations) if hooked else None,
            instr_submit_s=sum(c.submit_s for c in compilers),
            instr_session_enter_s=sum(c.session_enter_s for c in compilers),
            instr_first_measure_s=measure_durations[0] if measure_durations else None,
        )
        out["record_bound_s"] = max(out["record_compile_s"] / workers, out["record_measure_s"])
        if hooked:
            out["instr_bound_s"] = max(out["instr_compile_s"] / workers, out["instr_measure_s"])
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), atol=0.5, rtol=0.05)
    print("RESULT " + json.dumps(out))


def spawn(variant: str, n_configs: int, size: int, tmp: str, tag: str) -> dict[str, Any]:
    """Run one variant in a fresh process with fresh Triton and autotune cache directories."""
    env = common.child_env(tmp, tag)
    proc = subprocess.run(
        [sys.executable, str(HERE), "--child", variant, str(n_configs), "--size", str(size)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} ({n_configs} configs) failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    """Run every (configs, variant) pair in fresh processes; print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--size", type=int, default=2048, help="M = N = K (fp16)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each variant (the median is reported)")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.size)
        return
    common.skip_without_gpu("bench_cold_tuning")

    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        for n in args.configs:
            results[str(n)] = {v: [] for v in VARIANTS}
            for r in range(args.repeat):
                for v in VARIANTS:
                    print(f"  {n} configs, {v}, run {r + 1}/{args.repeat} ...", flush=True)
                    results[str(n)][v].append(spawn(v, n, args.size, tmp, f"{n}-{v}-{r}"))

    rows, summary = [], {}
    for n, by_variant in results.items():
        med = {v: common.median([r["wall_s"] for r in runs]) for v, runs in by_variant.items()}
        pipe = by_variant["pipeline"][0]
        instr_bound = common.median([r["instr_bound_s"] for r in by_variant["pipeline"] if "instr_bound_s" in r])
        record_bound = common.median([r["record_bound_s"] for r in by_variant["pipeline"]])
        summary[n] = {
            "wall_s": med,
            "pipeline_vs_triton": med["pipeline"] / med["triton"],
            "serial_vs_triton": med["serial"] / med["triton"],
            "pipeline_vs_serial": med["pipeline"] / med["serial"],
            "instr_bound_s": instr_bound,
            "record_bound_s": record_bound,
            "pipeline_vs_instr_bound": med["pipeline"] / instr_bound,
            "pipeline_vs_record_bound": med["pipeline"] / record_bound,
            "workers": pipe["workers"],
        }
        rows.append(
            [
                n,
                med["pipeline"],
                med["serial"],
                med["triton"],
                summary[n]["pipeline_vs_triton"],
                summary[n]["pipeline_vs_serial"],
                instr_bound,
                summary[n]["pipeline_vs_instr_bound"],
                record_bound,
                summary[n]["pipeline_vs_record_bound"],
            ]
        )
    print(
        f"\ncold tuning of matmul {args.size}^3 fp16 on {common.device_name()} "
        f"(fresh Triton + autotune caches per run; pipeline workers = {summary[str(args.configs[0])]['workers']})"
    )
    print(
        common.table(
            [
                "configs",
                "pipeline s",
                "serial s",
                "triton.autotune s",
                "pipe/triton",
                "pipe/serial",
                "bound s (instr)",
                "pipe/bound",
                "bound s (record)",
                "pipe/rec.bound",
            ],
            rows,
        )
    )
    for n in results:
        p = results[n]["pipeline"][0]
        print(
            f"  {n} configs, pipeline: compiles {p['instr_compile_s']:.2f} s total over {p['instr_compiles']} "
            f"compiles, measurement {p['instr_measure_s'] or float('nan'):.2f} s, submitting on the calling thread "
            f"{p['instr_submit_s']:.2f} s (entering the session {p.get('instr_session_enter_s', 0.0):.2f} s, the first "
            f"config's measurement {p.get('instr_first_measure_s') or float('nan'):.2f} s); record says compile_s "
            f"{p['record_compile_s']:.2f} s, samples {p['record_measure_s']:.3f} s"
        )
    print("targets: pipe/triton <= 0.5 on 64 configs; pipe/bound <= 1.15")
    common.write_results(
        "bench_cold_tuning", {"size": args.size, "repeat": args.repeat, "summary": summary, "raw": results}
    )


if __name__ == "__main__":
    main()
