"""An outside yardstick for the replay: kernel_tuner's own strategies on the same landscapes at the same budget.

kernel_tuner (the library whose cache format the landscapes are in) replays a cache with `tune_cache` in its
simulation mode. For each of its strategies and each landscape in bench/landscapes/, at `--fraction` of the
valid configs (`max_fevals`, which counts distinct configs), over `--seeds` seeds: the median and worst ratio of
the best config it evaluated over the landscape's best, and the seeds within 1.05, 1.15 (the columns of
bench_search_replay.py) and 1.25 (issue 43's worst-case threshold). kernel_tuner picks by each config's recorded
mean time, with no measurement noise, which favours it slightly against autotune's replay (noisy samples, then a
re-measurement).

kernel_tuner is not a dependency of autotune: `pip install kernel_tuner` (in a separate virtual environment if
you like; this script does not import autotune).

    python bench/bench_kernel_tuner_baseline.py [--seeds 20] [--fraction 0.02]
                                                [--strategies genetic_algorithm,pso,...]
                                                [--landscapes convolution_A4000,...] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import math
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

LANDSCAPES = Path(__file__).resolve().parent / "landscapes"
STRATEGIES = (
    "genetic_algorithm",
    "pso",
    "simulated_annealing",
    "firefly_algorithm",
    "bayes_opt",
    "dual_annealing",
    "diff_evo",
    "mls",
    "greedy_ils",
    "basinhopping",
    "random_sample",
)


def run_strategy(path: Path, best_ms: float, strategy: str, budget: int, seed: int) -> float:
    """One seeded kernel_tuner search of `budget` distinct configs: the best evaluated time over the best recorded."""
    import numpy as np
    from kernel_tuner.interface import tune_cache

    random.seed(seed)
    np.random.seed(seed)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = tune_cache(str(path), strategy=strategy, strategy_options={"max_fevals": budget}, quiet=True)
    found = [r["time"] for r in results if isinstance(r.get("time"), (int, float))]
    return min(found) / best_ms if found else math.inf


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--fraction", type=float, default=0.02)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--landscapes", default="", help="comma-separated names (default: every landscape)")
    parser.add_argument("--json", type=Path, default=None, help="write every ratio here")
    args = parser.parse_args()
    try:
        import kernel_tuner
    except ImportError:
        print("kernel_tuner is not installed: pip install kernel_tuner", file=sys.stderr)
        return 2
    print(
        f"kernel_tuner {kernel_tuner.__version__}, budget {args.fraction:.0%} of the valid configs, {args.seeds} seeds"
    )
    out: dict = {
        "kernel_tuner": kernel_tuner.__version__,
        "fraction": args.fraction,
        "seeds": args.seeds,
        "landscapes": {},
    }
    medians: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        wanted = set(filter(None, args.landscapes.split(",")))
        for gz in sorted(LANDSCAPES.glob("*.json.gz")):
            if wanted and gz.name.removesuffix(".json.gz") not in wanted:
                continue
            plain = Path(scratch) / gz.name.removesuffix(".gz")  # tune_cache reads plain JSON only
            with gzip.open(gz, "rb") as src:
                doc = json.load(src)
            # kernel_tuner takes a file that does not end in "}}}" or "}\n}" for one cut short and closes it again:
            # `cache` goes last (record_landscape.py writes its `autotune_recorder` block after it)
            cache = doc.pop("cache")
            plain.write_text(json.dumps({**doc, "cache": cache}))
            best_ms = min(e["time"] for e in cache.values() if isinstance(e.get("time"), (int, float)))
            budget = max(1, round(args.fraction * len(cache)))
            name = gz.name.removesuffix(".json.gz")
            out["landscapes"][name] = {"budget": budget, "ratios": {}}
            for strategy in args.strategies.split(","):
                started = time.perf_counter()
                ratios = [run_strategy(plain, best_ms, strategy, budget, seed) for seed in range(args.seeds)]
                out["landscapes"][name]["ratios"][strategy] = ratios
                median = statistics.median(ratios)
                medians.setdefault(strategy, []).append(median)
                print(
                    f"{name:18s} {strategy:20s} budget {budget:4d}  {median:.3f} / {max(ratios):.3f}  "
                    f"({sum(r <= 1.05 for r in ratios)}, {sum(r <= 1.15 for r in ratios)}, "
                    f"{sum(r <= 1.25 for r in ratios)} of {args.seeds})  "
                    f"[{time.perf_counter() - started:.0f} s]",
                    flush=True,
                )
    print("geometric mean of the medians:")
    for strategy, values in medians.items():
        print(f"  {strategy:20s} {statistics.geometric_mean(values):.3f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
