"""Dispatch overhead per call on a cache hit: this project against a plain `kernel[grid]` launch and triton.autotune.

CPU part (always runs): the pure-Python dispatch path with the launch replaced by a no-op, so only the
work each autotuner does per call is measured: binding arguments, building the key, the cache lookup,
splitting the config, the grid. Ours is measured as `kernel(...)` (grid from the decorator) and as
`kernel[grid](...)`, and the drop-in `autotune.compat.Autotuner` as `kernel[grid](...)`; Triton's `Autotuner` is constructed directly around a no-op `KernelInterface`;
the floor is a plain `noop[grid](...)` (with a tuple grid for `kernel(...)`, which computes its own
grid, and a lambda grid for the `kernel[lambda]` paths), and "overhead" is a variant's time minus its
floor's. The variants are interleaved in one run; each figure is the median over rounds of the mean per
call.

GPU part (skipped without CUDA): real launches of a tiny vector add (host-bound), per-call host time over
a burst of launches: plain `add_kernel[grid](..., BLOCK=...)`, ours on a cache hit, autotune.compat and
triton.autotune on a cache hit.

    python bench/bench_dispatch.py [--calls N] [--rounds R] [--profile]

Target: dispatch overhead no more than triton.autotune's (ours - floor <= triton - floor).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

GPU = common.prepare()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402
from triton.runtime.jit import KernelInterface  # noqa: E402

from autotune import autotune, compat  # noqa: E402
from autotune.engine.compilers import NoCompile  # noqa: E402

BLOCKS = (64, 128, 256, 512)
N = 4096


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    """out = x + y (the GPU part launches it for real)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def noop_base_kernel(x, y, out, n, BLOCK: tl.constexpr):
    """The CPU part's kernel: same signature as add_kernel; its `run` is replaced by a no-op below."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs))


ARG_NAMES = ["x", "y", "out", "n", "BLOCK"]


def noop_run(*args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
    """Stands in for JITFunction.run: evaluates a callable grid as Triton does, launches nothing."""
    if callable(grid):
        named = dict(zip(ARG_NAMES, args))
        named.update(kwargs)
        grid(named)


def _noop_python_fn(x: Any, y: Any, out: Any, n: Any, BLOCK: Any) -> None:
    """The Python function under the no-op kernel (Triton's Autotuner walks `.fn` down to one)."""


class NoopKernel(KernelInterface):
    """A KernelInterface whose launch does nothing: what triton.autotune's Autotuner wraps in the CPU part."""

    def __init__(self) -> None:
        self.fn = _noop_python_fn
        self.arg_names = ARG_NAMES

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        noop_run(*args, grid=grid, warmup=warmup, **kwargs)


def fake_triton_bench(kernel_call: Callable[[], Any], quantiles: Any = None) -> list[float]:
    """do_bench for Triton's Autotuner in the CPU part: run once, report a made-up time (BLOCK order wins)."""
    kernel_call()
    return [1.0, 1.0, 1.0]


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    """Mean wall time per call in microseconds over `calls` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def interleaved(variants: dict[str, Callable[[], Any]], calls: int, rounds: int) -> dict[str, float]:
    """Median over `rounds` of each variant's mean per-call time (µs), the variants taking turns each round."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():
        per_call_us(fn, max(100, calls // 10))  # warm up
    for _ in range(rounds):
        for name, fn in variants.items():
            samples[name].append(per_call_us(fn, calls))
    return {name: common.median(vals) for name, vals in samples.items()}


def cpu_part(calls: int, rounds: int, profile: bool) -> dict[str, Any]:
    """The pure-Python dispatch path of each autotuner with a no-op launch."""
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)

    # Plain launch: noop_base_kernel[grid](...) with a no-op run (KernelInterface.__getitem__ + the no-op).
    plain = noop_base_kernel
    plain.run = noop_run

    # Ours: the same base kernel, tuned once (no compile, a fake do_bench) so that every call below is a hit.
    ours = autotune(
        space={"BLOCK": BLOCKS},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        do_bench=lambda call: (call(), 1.0)[1],
        tuning="fast",
    )(noop_base_kernel)
    ours.compiler_factory = lambda tuned, prepare: NoCompile()
    ours(x, y, out, N)
    assert ours.cache_info()["tunings"] == 1

    # triton.autotune's Autotuner around a no-op KernelInterface, tuned once with a fake do_bench.
    tri = Autotuner(
        NoopKernel(),
        ARG_NAMES,
        [triton.Config({"BLOCK": b}) for b in BLOCKS],
        key=["n"],
        reset_to_zero=None,
        restore_value=None,
        do_bench=fake_triton_bench,
    )
    grid = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731
    tri[grid](x, y, out, N)
    assert len(tri.cache) == 1

    # autotune.compat's drop-in around the same no-op-run kernel, with the same configs, key and fake do_bench:
    # a user who changed one import. Tuned once, so every call below is a hit.
    drop_in = compat.Autotuner(
        noop_base_kernel,
        ARG_NAMES,
        [triton.Config({"BLOCK": b}) for b in BLOCKS],
        key=["n"],
        reset_to_zero=None,
        restore_value=None,
        do_bench=fake_triton_bench,
    )
    drop_in.tuner.compiler_factory = lambda tuned, prepare: NoCompile()
    drop_in[grid](x, y, out, N)
    assert len(drop_in.cache) == 1

    fixed_grid = (triton.cdiv(N, 128),)
    # name -> (thunk, the plain launch it is compared with). kernel(...) computes its grid from the decorator
    # and hands Triton a tuple, so its floor is a plain launch with a tuple grid; the kernel[grid] paths hand
    # Triton a callable grid (evaluated by the no-op, as Triton would), so their floor is a plain lambda-grid launch.
    plain_tuple, plain_lambda = "plain noop[(g,)](...)", "plain noop[lambda](...)"
    variants: dict[str, tuple[Callable[[], Any], str | None]] = {
        plain_tuple: (lambda: plain[fixed_grid](x, y, out, N, BLOCK=128), None),
        plain_lambda: (lambda: plain[grid](x, y, out, N, BLOCK=128), None),
        "autotune: kernel(...)": (lambda: ours(x, y, out, N), plain_tuple),
        "autotune: kernel[lambda](...)": (lambda: ours[grid](x, y, out, N), plain_lambda),
        "autotune.compat: kernel[lambda](...)": (lambda: drop_in[grid](x, y, out, N), plain_lambda),
        "triton.autotune: kernel[lambda](...)": (lambda: tri[grid](x, y, out, N), plain_lambda),
    }
    us = interleaved({name: thunk for name, (thunk, _) in variants.items()}, calls, rounds)
    tri_name = "triton.autotune: kernel[lambda](...)"
    tri_over = us[tri_name] - us[plain_lambda]
    overhead = {name: us[name] - us[floor] for name, (_, floor) in variants.items() if floor is not None}
    rows = [
        [
            name,
            us[name],
            floor or "-",
            overhead.get(name),
            us[name] / us[tri_name],
            overhead[name] / tri_over if name in overhead else None,
        ]
        for name, (_, floor) in variants.items()
    ]
    print(
        f"CPU part: pure-Python dispatch on a cache hit, launch replaced by a no-op "
        f"({calls} calls x {rounds} rounds, interleaved; medians)"
    )
    print(
        common.table(
            [
                "variant",
                "us/call",
                "compared with",
                "overhead us",
                "total x triton.autotune",
                "overhead x triton.autotune's",
            ],
            rows,
        )
    )
    result: dict[str, Any] = {
        "calls": calls,
        "rounds": rounds,
        "us_per_call": us,
        "overhead_us": overhead,
        "ratio_total_vs_triton": {k: v / us[tri_name] for k, v in us.items()},
        "ratio_overhead_vs_triton": {k: v / tri_over for k, v in overhead.items()},
    }
    if profile:
        result["profile_top"] = profile_ours(lambda: ours(x, y, out, N), calls)
    return result


def profile_ours(call: Callable[[], Any], calls: int) -> str:
    """cProfile of our dispatch on a cache hit: the functions with the most own time."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        call()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
    text = buf.getvalue()
    print(f"\ncProfile of autotune's kernel(...) on a cache hit, {calls} calls, by own time:")
    print("\n".join(line for line in text.splitlines()[4:] if line.strip()))
    return text


def gpu_part(calls: int, rounds: int) -> dict[str, Any]:
    """Real launches of a tiny kernel, per-call host time over a burst: plain, ours, compat, triton.autotune (hits)."""
    dev = "cuda"
    x, y, out = torch.randn(N, device=dev), torch.randn(N, device=dev), torch.empty(N, device=dev)
    grid = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731
    ours = autotune(space={"BLOCK": BLOCKS}, key=["n"], grid="(cdiv(n, $BLOCK),)")(add_kernel)
    ours(x, y, out, N)
    assert ours.best_config is not None
    best = dict(ours.best_config)["BLOCK"]
    tri = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in BLOCKS], key=["n"])(add_kernel)
    tri[grid](x, y, out, N)
    drop_in = compat.autotune(configs=[triton.Config({"BLOCK": b}) for b in BLOCKS], key=["n"])(add_kernel)
    drop_in[grid](x, y, out, N)
    torch.cuda.synchronize()

    variants = {
        f"plain add_kernel[grid](..., BLOCK={best})": lambda: add_kernel[grid](x, y, out, N, BLOCK=best),
        "autotune: kernel(...)": lambda: ours(x, y, out, N),
        "autotune: kernel[grid](...)": lambda: ours[grid](x, y, out, N),
        "autotune.compat: kernel[grid](...)": lambda: drop_in[grid](x, y, out, N),
        "triton.autotune: kernel[grid](...)": lambda: tri[grid](x, y, out, N),
    }
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, fn in variants.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    us = {k: common.median(v) for k, v in samples.items()}
    floor = next(iter(us.values()))
    tri_us = us["triton.autotune: kernel[grid](...)"]
    rows = [[name, v, v - floor, v / tri_us] for name, v in us.items()]
    print(
        f"\nGPU part: real launches of a {N}-element add on a cache hit, host time per call "
        f"({calls} calls x {rounds} rounds; medians)"
    )
    print(common.table(["variant", "us/call", "over plain us", "x triton.autotune"], rows))
    return {
        "calls": calls,
        "rounds": rounds,
        "us_per_call": us,
        "floor_us": floor,
        "ratio_total_vs_triton": {k: v / tri_us for k, v in us.items()},
    }


def main() -> None:
    """Run the CPU part, then the GPU part when a GPU is present; print tables and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per round (CPU part)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gpu-calls", type=int, default=2000, help="calls per round (GPU part)")
    parser.add_argument("--profile", action="store_true", help="also cProfile our dispatch path")
    args = parser.parse_args()
    for mode in ("AUTOTUNE_FORCE", "AUTOTUNE_OFFLINE", "AUTOTUNE_DISABLE"):
        os.environ.pop(mode, None)
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as tmp:
        os.environ["AUTOTUNE_CACHE_DIR"] = tmp  # a private cache: the tuning below really tunes, leaves nothing
        payload: dict[str, Any] = {"cpu": cpu_part(args.calls, args.rounds, args.profile)}
        if GPU:
            payload["gpu"] = gpu_part(args.gpu_calls, args.rounds)
        else:
            print("\nGPU part: needs a CUDA GPU; skipped")
            payload["gpu"] = None
    common.write_results("bench_dispatch", payload)


if __name__ == "__main__":
    main()
