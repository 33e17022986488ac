"""Autotuned kernels inside a compiled model (issue 44's additions to the GPU suite): examples/compiled_model.py's
model warmed up, then compiled with `torch.compile(fullgraph=True)` (Inductor) and with `mode="reduce-overhead"`
(Inductor's CUDA graphs), and a sweep of new keys over the local GPU.

It checks, and exits 1 when any fails: no graph break; each compiled output equals eager; no tuning while serving
warmed shapes; no tuning inside a CUDA-graph capture (a key met there untuned warns `CaptureWarning` and launches
a known config); the sweep tunes its keys on this GPU. It prints the time per forward call of eager, compiled and
reduce-overhead side by side (CUDA events, median of rounds). The library registers its ops with
`torch.library.custom_op` (DESIGN 2e): the `triton_op` route is not offered, so it is not measured.

Without a GPU it runs the same steps it can on the CPU interpreter (backend="aot_eager", no capture, no timing).

    python bench/bench_compiled.py [--calls 50]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

GPU = common.prepare()
sys.path.insert(0, str(common.ROOT / "examples"))
os.environ["AUTOTUNE_CACHE_DIR"] = common.scratch_dir("autotune-bench-compiled-")  # every key new: the checks hold

import torch  # noqa: E402

import autotune  # noqa: E402

cm = importlib.import_module("compiled_model")  # by name, so that a sweep worker imports its kernels too
KERNELS = (cm.add_kernel, cm.scaled_relu_kernel)
FAILED: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"  {'ok ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILED.append(what)


def tunings() -> int:
    counters = autotune.stats()
    return int(sum(counters.get(k.name, {}).get("tunings", 0) for k in KERNELS))


def per_call_ms(fn, x: torch.Tensor, calls: int) -> float:
    """Median over 5 rounds of the mean time of `calls` forward calls (CUDA events)."""
    rounds = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn(x)
        end.record()
        torch.cuda.synchronize()
        rounds.append(start.elapsed_time(end) / calls)
    return statistics.median(rounds)


def serve(name: str, compiled, model, sizes) -> None:
    """Each warmed size through `compiled` three times: equal to eager, and nothing tuned."""
    before = tunings()
    equal = True
    for n in sizes:
        for _ in range(3):
            x = torch.randn(n, device=cm.DEVICE)
            equal &= bool(torch.allclose(compiled(x), cm.reference(model, x)))
    check(equal, f"{name}: every output equals eager")
    check(tunings() == before, f"{name}: no tuning while serving warmed shapes ({tunings() - before} tunings)")


def unwarmed_in_capture(model, n: int) -> None:
    """A shape never warmed up, first met by reduce-overhead: tuned in Inductor's eager warm-up run, or launched
    untuned inside the capture (a CaptureWarning); a tuning inside the capture would synchronize and break it."""
    compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    before = tunings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):  # Inductor's CUDA graphs: eager warm-up run(s) first, then the capture, then replays
            x = torch.randn(n, device=cm.DEVICE)
            out = compiled(x)
        torch.cuda.synchronize()
    in_capture = [w for w in caught if issubclass(w.category, autotune.CaptureWarning)]
    check(bool(torch.allclose(out, cm.reference(model, x))), f"reduce-overhead, unwarmed n={n}: output equals eager")
    print(
        f"  {tunings() - before} tuning(s) outside the capture, {len(in_capture)} CaptureWarning(s) (a key first met "
        "inside the capture, launched with a known config)"
    )


def timings(model, compiled, reduced, n: int, calls: int) -> None:
    x = torch.randn(n, device=cm.DEVICE)
    eager_ms = per_call_ms(model, x, calls)
    compiled_ms = per_call_ms(compiled, x, calls)
    reduced_ms = per_call_ms(reduced, x, calls)
    print(
        f"  n={n}: per forward call eager {eager_ms * 1e3:.1f} us, compiled {compiled_ms * 1e3:.1f} us "
        f"(x{compiled_ms / eager_ms:.2f}), reduce-overhead {reduced_ms * 1e3:.1f} us (x{reduced_ms / eager_ms:.2f})"
    )


def sweep_local(sizes) -> None:
    report = autotune.sweep(cm.add_kernel, [functools.partial(cm.add_args, n) for n in sizes], executor="local")
    print(f"  {report}".replace("\n", "\n  "))
    check(sorted(k.status for k in report.keys) == ["tuned"] * len(sizes), f"sweep: {len(sizes)} new keys tuned")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="forward calls per timing round (GPU)")
    args = parser.parse_args()
    model = cm.Model(max(cm.SIZES))
    print(f"device: {common.device_name()}; sizes {cm.SIZES}")
    for kernel, maker in ((cm.add_kernel, cm.add_args), (cm.scaled_relu_kernel, cm.scaled_relu_args)):
        autotune.warmup(kernel, [functools.partial(maker, n) for n in cm.SIZES])
    explained = torch._dynamo.explain(model)(torch.randn(cm.SIZES[0], device=cm.DEVICE))
    check(explained.graph_break_count == 0, f"fullgraph: {explained.graph_break_count} graph breaks")
    backend = "inductor" if GPU else "aot_eager"
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=backend)
    serve(f"torch.compile(fullgraph=True, backend={backend!r})", compiled, model, cm.SIZES)
    if not GPU:
        print("no CUDA GPU: reduce-overhead (CUDA graphs), timings and the GPU sweep are skipped")
        return 1 if FAILED else 0
    reduced = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    serve('torch.compile(fullgraph=True, mode="reduce-overhead")', reduced, model, cm.SIZES)
    unwarmed_in_capture(model, cm.SIZES[-1] - 1000)  # a key not warmed, inside the bias
    timings(model, compiled, reduced, cm.SIZES[-1], args.calls)
    sweep_local([cm.SIZES[-1] + 64 * i for i in range(1, 5)])
    print("all checks passed" if not FAILED else f"{len(FAILED)} check(s) failed: {FAILED}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
