"""Search on a real GPU: `strategy="model"` against `"random"` at the same budget, tuning kernels/matmul.py's
WIDE_SPACE (888 configs) at one fp16 shape, scored against the brute-force landscape of that space and shape
recorded on the same GPU by bench/record_landscape.py (GPU only).

Each run is a fresh process with fresh autotune and Triton cache directories (every compile is real) that tunes
the key cold with `Tuning(strategy=S, max_configs=BUDGET, seed=SEED)`, the rest as a user gets it. Per run:
  landscape ratio   the winner's recorded mean time over the landscape's best
  live ratio        the winner against the landscape's best config re-measured side by side in this process
                    (`--rounds` rounds alternating which goes first, each a do_bench median, L2 flushed)
  tuning s          wall time of the first call (compiles, measurements, the winner's launch)
The landscape's own totals (compile time over the compile workers, plus every config's timed reps) stand in for
an exhaustive tuning of the space. `--replay` also replays the landscape on the CPU for the same strategies and
budget (20 seeds), so the live result can be set beside the simulated one.

    python bench/bench_search_gpu.py [--landscape PATH] [--budget 64] [--seeds 3] [--strategies model,random]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402


def child(strategy: str, budget: int, seed: int, size: int) -> None:
    """One cold tuning in this (fresh) process; prints a RESULT line. (Without a GPU it tunes CPU_SPACE through
    the interpreter at a tiny shape, so that this path is tested on a CPU.)"""
    gpu = common.prepare()
    import torch

    from autotune import Tuning
    from autotune.options import Strategy
    from kernels.matmul import CPU_SPACE, WIDE_SPACE, make_matmul, matmul

    dev = "cuda" if gpu else "cpu"
    size = size if gpu else 64
    kernel = make_matmul(
        WIDE_SPACE if gpu else CPU_SPACE,
        tuning=Tuning(strategy=cast(Strategy, strategy), max_configs=budget, seed=seed),
    )
    torch.manual_seed(0)
    a = torch.randn((size, size), device=dev, dtype=torch.float16)
    b = torch.randn((size, size), device=dev, dtype=torch.float16)
    torch.matmul(a[:64, :64], b[:64, :64])  # CUDA context and cuBLAS handle outside the timed call
    if gpu:
        torch.cuda.synchronize()
    started = time.perf_counter()
    matmul(a, b, kernel=kernel)
    if gpu:
        torch.cuda.synchronize()
    wall = time.perf_counter() - started
    record = kernel.record()
    print(
        "RESULT "
        + json.dumps(
            {
                "winner": dict(record.winner),
                "tuning_wall_s": wall,
                "tuning_s": record.tuning_s,
                "strategy": record.strategy,
                "space_size": record.space_size,
                "tried": len(record.trials),
                "ok": sum(1 for t in record.trials if t.ok),
            }
        )
    )


def spawn(strategy: str, budget: int, seed: int, size: int, tmp: str, timeout_s: float) -> dict[str, Any]:
    """One cold run in a fresh process with fresh Triton and autotune cache directories."""
    tag = f"{strategy}-{seed}"
    env = common.child_env(tmp, tag)
    cmd = [sys.executable, str(HERE), "--child", strategy, str(budget), str(seed), "--size", str(size)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{tag} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def remeasure(size: int, configs: list[dict[str, Any]], rounds: int, rep_ms: int) -> list[float]:
    """Median over `rounds` of do_bench's median (ms) for each config, the order rotated every round."""
    from record_landscape import launcher, operands

    a, b, c = operands((size, size, size), "cuda")
    return common.interleaved_medians([launcher(a, b, c, cfg) for cfg in configs], rounds, rep_ms)


def landscape_cost_s(landscape: Any, workers: int) -> float:
    """What an exhaustive tuning of the landscape's space costs at least: its compiles spread over `workers`,
    plus every config's timed repetitions."""
    entries = landscape.entries.values()
    compile_s = sum(e["compile_time"] for e in entries) / 1e3 / max(1, workers)
    measure_s = sum(sum(e["times"]) for e in entries) / 1e3
    return compile_s + measure_s


def default_landscape() -> Path | None:
    """bench/results/<this GPU>/matmul_landscape.json.gz, where record_landscape.py writes it."""
    import torch
    from record_landscape import gpu_slug

    path = common.RESULTS / gpu_slug(torch.cuda.get_device_name()) / "matmul_landscape.json.gz"
    return path if path.exists() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--landscape", type=Path, default=None, help="default: bench/results/<gpu>/matmul_landscape.json.gz"
    )
    parser.add_argument("--budget", type=int, default=64, help="configs per tuning (max_configs)")
    parser.add_argument("--seeds", type=int, default=3, help="runs per strategy")
    parser.add_argument("--strategies", default="model,random")
    parser.add_argument("--rounds", type=int, default=5, help="side-by-side re-measurement rounds")
    parser.add_argument("--rep-ms", type=int, default=20, help="do_bench time budget per config per round")
    parser.add_argument("--run-timeout-s", type=float, default=240.0)
    parser.add_argument("--replay", action="store_true", help="also replay the landscape on the CPU (20 seeds)")
    parser.add_argument("--child", nargs=3, metavar=("STRATEGY", "BUDGET", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=None, help="M = N = K (default: the landscape's)")
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]), args.size or 4096)
        return 0
    common.skip_without_gpu("bench_search_gpu")
    common.prepare()
    from autotune import Config, Tuning
    from autotune.reporting.replay import load_landscape, replay

    path = args.landscape or default_landscape()
    if path is None:
        print("bench_search_gpu: no landscape of this GPU; run bench/record_landscape.py first (or --landscape)")
        return 1
    landscape = load_landscape(path)
    size = args.size or int((landscape.problem_size or (4096,))[0])
    timed = {c: t for c in landscape.entries if (t := landscape.time_of(c)) is not None}
    best_config = min(timed, key=lambda c: timed[c])
    strategies = args.strategies.split(",")
    replayed: dict[str, Any] = {}
    if args.replay:  # cheap (CPU, simulated clock), so first: a cut-off run still has it
        for strategy in strategies:
            rep = replay(landscape, strategy, args.budget, 20)
            replayed[strategy] = {"median_ratio": rep["median_ratio"], "worst_ratio": rep["worst_ratio"]}
            print(
                f"replay of the landscape, {strategy}, 20 seeds: median x{rep['median_ratio']:.3f}, worst "
                f"x{rep['worst_ratio']:.3f}",
                flush=True,
            )
    runs: list[dict[str, Any]] = []
    exhaustive_s = landscape_cost_s(landscape, Tuning().compile_workers)

    def save(complete: bool) -> None:
        common.write_results(
            "bench_search_gpu",
            {
                "landscape": str(path),
                "size": size,
                "budget": args.budget,
                "complete": complete,
                "runs": runs,
                "summary": summary,
                "exhaustive_min_s": exhaustive_s,
                "best_config": dict(best_config),
                "best_ms": landscape.best_ms,
                "replay": replayed,
            },
        )

    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-search-gpu-") as tmp:
        for seed in range(args.seeds):
            for strategy in strategies:  # interleaved, so drift hits the strategies alike
                try:
                    got = spawn(strategy, args.budget, seed, size, tmp, args.run_timeout_s)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:  # reported; the other runs go on
                    print(f"!! {strategy} seed {seed}: {str(exc)[:2000]}", flush=True)
                    runs.append({"seed": seed, "strategy_asked": strategy, "error": str(exc)[:2000]})
                    save(complete=False)
                    continue
                winner = got["winner"]
                recorded = landscape.time_of(Config(winner)) if Config(winner) in landscape.entries else None
                live_winner, live_best = remeasure(size, [winner, dict(best_config)], args.rounds, args.rep_ms)
                got.update(
                    seed=seed,
                    strategy_asked=strategy,
                    landscape_ms=recorded,
                    landscape_ratio=None if recorded is None else recorded / landscape.best_ms,
                    live_ms=live_winner,
                    live_best_ms=live_best,
                    live_ratio=live_winner / live_best,
                )
                runs.append(got)
                save(complete=False)
                print(
                    f"  {strategy} seed {seed}: {winner} landscape x{got['landscape_ratio'] or float('nan'):.3f} "
                    f"live x{got['live_ratio']:.3f} in {got['tuning_wall_s']:.1f} s",
                    flush=True,
                )
    rows = []
    for strategy in strategies:
        mine = [r for r in runs if r["strategy_asked"] == strategy and "error" not in r]
        if not mine:
            continue
        land = [r["landscape_ratio"] for r in mine if r["landscape_ratio"] is not None]
        live = [r["live_ratio"] for r in mine]
        wall = [r["tuning_wall_s"] for r in mine]
        summary[strategy] = {
            "landscape_median": statistics.median(land) if land else None,
            "landscape_worst": max(land) if land else None,
            "live_median": statistics.median(live),
            "live_worst": max(live),
            "tuning_s_median": statistics.median(wall),
        }
        rows.append(
            [
                strategy,
                args.budget,
                len(mine),
                summary[strategy]["landscape_median"],
                summary[strategy]["landscape_worst"],
                statistics.median(live),
                max(live),
                statistics.median(wall),
            ]
        )
    print(
        f"\nsearch on {common.device_name()}: kernels/matmul.py WIDE_SPACE ({landscape.valid_configs} configs in the "
        f"landscape), {size}^3 fp16, budget {args.budget} configs ({args.budget / landscape.valid_configs:.0%})"
    )
    print(
        common.table(
            [
                "strategy",
                "budget",
                "runs",
                "landscape median",
                "landscape worst",
                "live median",
                "live worst",
                "tuning s",
            ],
            rows,
        )
    )
    print(
        f"exhaustive over the landscape's space costs at least {exhaustive_s:.0f} s (its compiles over "
        f"{Tuning().compile_workers} workers plus every timed rep); best {landscape.best_ms * 1e3:.1f} us "
        f"{dict(best_config)}"
    )
    save(complete=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
