"""Transfer across device kinds, replayed on a CPU: the `model` search with another device kind's landscape of the
same kernel as its prior, against no prior and against constructed wrong priors, at the same budget and seeds.

Priors (issue 43): the convolution landscapes measured on an A100 and an RTX A4000 are each other's same-vendor
prior; the wrong priors are a landscape's own ranking reversed and another landscape's configs in an order shuffled
with a fixed seed (the times stay attached to the positions). Targets at 2% of the valid configs over 20 seeds
(median / worst of the chosen config's recorded time over the best): same-vendor prior 1.02 / 1.10; a wrong
prior no worse than no prior, beyond noise.

    python bench/bench_transfer_replay.py [--seeds 20] [--fraction 0.02] [--pairs convolution_A4000:convolution_A100]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.prepare()

from autotune.engine.search import Prior  # noqa: E402
from autotune.reporting.replay import landscape_prior, load_landscape, replay_once  # noqa: E402

LANDSCAPES = Path(__file__).resolve().parent / "landscapes"
PAIRS = "convolution_A100:convolution_A4000,convolution_A4000:convolution_A100,pnpoly_RTX_3090:pnpoly_RTX_3090"


def priors(source) -> dict[str, Prior | None]:
    """No prior, the source's ranking, its ranking reversed, and its configs shuffled with seed 0."""
    right = landscape_prior(source)
    shuffled = list(right.configs_ranked)
    random.Random(0).shuffle(shuffled)
    return {
        "none": None,
        "other device": right,
        "reversed": Prior(right.configs_ranked[::-1], right.times_ms, right.device, "reversed"),
        "permuted": Prior(tuple(shuffled), right.times_ms, right.device, "permuted"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--fraction", type=float, default=0.02)
    parser.add_argument("--pairs", default=PAIRS, help="target:source landscape names, comma-separated")
    args = parser.parse_args()
    rows, results = [], []
    for pair in args.pairs.split(","):
        target_name, source_name = pair.split(":")
        target = load_landscape(LANDSCAPES / f"{target_name}.json.gz")
        source = load_landscape(LANDSCAPES / f"{source_name}.json.gz")
        budget = max(1, round(args.fraction * target.valid_configs))
        for kind, prior in priors(source).items():
            if kind == "other device" and source_name == target_name:
                continue  # a landscape is no prior of itself
            started = time.perf_counter()
            runs = [replay_once(target, "model", budget, seed, prior=prior) for seed in range(args.seeds)]
            ratios = [r["ratio"] for r in runs]
            ranks = [r["prior_rank"] for r in runs if r["prior_rank"] is not None]
            rows.append(
                [
                    target_name,
                    source_name if kind == "other device" else kind,
                    budget,
                    f"{statistics.median(ratios):.3f}",
                    f"{max(ratios):.3f}",
                    sum(r <= 1.05 for r in ratios),
                    sum(r <= 1.25 for r in ratios),
                    statistics.median(ranks) if ranks else "-",
                    f"{time.perf_counter() - started:.0f}",
                ]
            )
            results.append({"target": target_name, "source": source_name, "prior": kind, "runs": runs})
    print(f"model search, budget {args.fraction:.0%} of the valid configs, {args.seeds} seeds")
    headers = ["landscape", "prior", "budget", "median", "worst", "<=1.05", "<=1.25", "winner's prior rank", "wall s"]
    print(common.table(headers, rows))
    common.write_results("bench_transfer_replay", {"fraction": args.fraction, "seeds": args.seeds, "runs": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
