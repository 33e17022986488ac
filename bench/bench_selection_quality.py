"""Selection quality: how close the tuner's pick is to the truly best config (GPU only).

For each kernel in kernels/ (vector_add, softmax, matmul, layer_norm) and three shapes: tune with the
kernel's full SPACE and the default Tuning (a fresh autotune cache, so it really tunes), then re-measure
every config that ran with `triton.testing.do_bench` (median, many reps), interleaved: several rounds, each
visiting all configs in a new random order, so clock and thermal drift hit every config alike. "Best" is
the config with the lowest median over rounds; the score is chosen / best (1.00 = the best was chosen).

Target: chosen config within 3% of the best (chosen / best <= 1.03) for every kernel and shape.

    python bench/bench_selection_quality.py [--rounds 5] [--rep-ms 25] [--kernels matmul softmax ...]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def cases() -> dict[str, dict[str, Any]]:
    """Per kernel: its factory, its torch wrapper, and three input shapes."""
    import torch

    from kernels import layer_norm, matmul, softmax, vector_add

    dev = "cuda"
    f16, f32 = torch.float16, torch.float32

    def vec(n: int) -> Callable[[], tuple]:
        return lambda: (torch.randn(n, device=dev, dtype=f32), torch.randn(n, device=dev, dtype=f32))

    def rows(m: int, n: int, dtype: Any) -> Callable[[], tuple]:
        return lambda: (torch.randn(m, n, device=dev, dtype=dtype),)

    def mm(m: int, n: int, k: int) -> Callable[[], tuple]:
        return lambda: (torch.randn(m, k, device=dev, dtype=f16), torch.randn(k, n, device=dev, dtype=f16))

    def ln(m: int, n: int) -> Callable[[], tuple]:
        return lambda: (
            torch.randn(m, n, device=dev, dtype=f16),
            torch.randn(n, device=dev, dtype=f16),
            torch.randn(n, device=dev, dtype=f16),
        )

    return {
        "vector_add": {
            "make": vector_add.make_add,
            "call": vector_add.add,
            "shapes": [("n=65536 fp32", vec(1 << 16)), ("n=2^20 fp32", vec(1 << 20)), ("n=2^24 fp32", vec(1 << 24))],
        },
        "softmax": {
            "make": softmax.make_softmax,
            "call": softmax.softmax,
            "shapes": [
                ("4096x256 fp16", rows(4096, 256, f16)),
                ("4096x2048 fp16", rows(4096, 2048, f16)),
                ("1024x8192 fp32", rows(1024, 8192, f32)),
            ],
        },
        "matmul": {
            "make": matmul.make_matmul,
            "call": matmul.matmul,
            "shapes": [
                ("512^3 fp16", mm(512, 512, 512)),
                ("2048^3 fp16", mm(2048, 2048, 2048)),
                ("8192x1024x1024 fp16", mm(8192, 1024, 1024)),
            ],
        },
        "layer_norm": {
            "make": layer_norm.make_layer_norm,
            "call": layer_norm.layer_norm,
            "shapes": [
                ("4096x512 fp16", ln(4096, 512)),
                ("4096x2048 fp16", ln(4096, 2048)),
                ("1024x8192 fp16", ln(1024, 8192)),
            ],
        },
    }


def capture_launch(kernel: Any) -> dict[str, Any]:
    """Make `kernel` remember the positional and keyword arguments of its last launch (to replay per config)."""
    seen: dict[str, Any] = {}
    original = kernel.run

    def run(*args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        seen.update(args=args, kwargs=kwargs, grid=grid)
        return original(*args, grid=grid, warmup=warmup, **kwargs)

    kernel.run = run
    return seen


def config_launcher(kernel: Any, config: Any, seen: dict[str, Any]) -> Callable[[], Any]:
    """A thunk launching exactly `config` with the captured arguments, through the decorator's own launch path
    (grid, derived meta-parameters, compile options), bypassing selection."""
    bound = kernel.bind(seen["args"], seen["kwargs"])
    launch_args, launch_kwargs, launch_grid = kernel.launch_args(config, bound, seen["grid"])
    base = kernel.fn
    return lambda: base.run(*launch_args, grid=launch_grid, warmup=False, **launch_kwargs)


def measure_all(thunks: dict[Any, Callable[[], Any]], rounds: int, rep_ms: int, seed: int) -> dict[Any, float]:
    """Median over `rounds` of do_bench's median per config, visiting configs in a new random order each round."""
    import triton.testing

    rng = random.Random(seed)
    samples: dict[Any, list[float]] = {c: [] for c in thunks}
    order = list(thunks)
    for thunk in thunks.values():  # compile and warm every config before timing any
        thunk()
    for _ in range(rounds):
        rng.shuffle(order)
        for config in order:
            samples[config].append(
                float(triton.testing.do_bench(thunks[config], warmup=5, rep=rep_ms, return_mode="median"))
            )
    return {c: common.median(v) for c, v in samples.items()}


def main() -> None:
    """Tune and exhaustively re-measure each kernel and shape; print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rep-ms", type=int, default=25, help="do_bench time budget per config per round")
    parser.add_argument("--kernels", nargs="+", default=None, help="subset of: vector_add softmax matmul layer_norm")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    common.skip_without_gpu("bench_selection_quality")
    common.prepare()
    import torch

    rows, out = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        os.environ["AUTOTUNE_CACHE_DIR"] = tmp  # a fresh cache: every (kernel, shape) really tunes
        os.environ.pop("AUTOTUNE_OFFLINE", None)
        os.environ.pop("AUTOTUNE_DISABLE", None)
        for name, spec in cases().items():
            if args.kernels and name not in args.kernels:
                continue
            for label, make_inputs in spec["shapes"]:
                torch.manual_seed(0)
                inputs = make_inputs()
                kernel = spec["make"]()  # the kernel's full SPACE, default Tuning
                seen = capture_launch(kernel)
                spec["call"](*inputs, kernel=kernel)  # tunes
                torch.cuda.synchronize()
                record = kernel.record()
                chosen = record.winner
                ok = [t.config for t in record.trials if t.ok]
                times = measure_all(
                    {c: config_launcher(kernel, c, seen) for c in ok}, args.rounds, args.rep_ms, args.seed
                )
                best = min(times, key=lambda c: times[c])
                ratio = times[chosen] / times[best]
                rank = sorted(times, key=lambda c: times[c]).index(chosen) + 1
                rows.append(
                    [
                        name,
                        label,
                        len(record.trials),
                        len(ok),
                        times[chosen] * 1e3,
                        times[best] * 1e3,
                        ratio,
                        rank,
                        "yes" if ratio <= 1.03 else "NO",
                    ]
                )
                out[f"{name} {label}"] = {
                    "configs": len(record.trials),
                    "ok": len(ok),
                    "chosen": dict(chosen),
                    "best": dict(best),
                    "chosen_us": times[chosen] * 1e3,
                    "best_us": times[best] * 1e3,
                    "ratio": ratio,
                    "rank": rank,
                    "tuning_s": record.tuning_s,
                    "tuner_median_us": {str(dict(t.config)): t.median_ms * 1e3 for t in record.trials if t.ok},
                    "careful_median_us": {str(dict(c)): v * 1e3 for c, v in times.items()},
                }
                print(f"  {name} {label}: chosen/best {ratio:.3f} (rank {rank}/{len(ok)})", flush=True)

    print(
        f"\nselection quality on {common.device_name()} (careful re-measurement: do_bench median, "
        f"{args.rounds} interleaved rounds x {args.rep_ms} ms per config)"
    )
    print(
        common.table(
            ["kernel", "shape", "configs", "ran", "chosen us", "best us", "chosen/best", "rank", "within 3%"], rows
        )
    )
    worst = max((r[6] for r in rows), default=float("nan"))
    print(f"worst chosen/best: {worst:.3f} (target <= 1.03)")
    common.write_results(
        "bench_selection_quality", {"rounds": args.rounds, "rep_ms": args.rep_ms, "worst_ratio": worst, "cases": out}
    )


if __name__ == "__main__":
    main()
