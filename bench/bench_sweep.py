"""Sweep scaling: the same sweep (one new key per size) with 1 and 2 workers, on the local executor and on Ray,
side by side; prints each run's wall time, its tuning phase (the workers' start apart), the scaling efficiency
(time with 1 worker over twice the time with 2; target >= 0.8 for the local executor at 2 workers on 2 cores)
and Ray's overhead against the local executor.

    python bench/bench_sweep.py [--keys 8] [--no-ray]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

GPU = common.prepare()
os.environ["AUTOTUNE_PROGRESS"] = "0"

import sweep_bench_kernel as kmod  # noqa: E402


def run(executor: str, workers: int, sizes: list[int]) -> tuple[float, float]:
    """(wall s, tuning s) of one sweep of new keys into a fresh cache directory."""
    import autotune

    os.environ["AUTOTUNE_CACHE_DIR"] = common.scratch_dir("autotune-bench-sweep-")
    report = autotune.sweep(kmod.bench_add, kmod.calls(sizes), executor=executor, workers=workers)
    assert len(report.tuned) == len(sizes), str(report)
    return report.wall_s, report.wall_s - report.start_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=8, help="keys in the sweep (default 8)")
    parser.add_argument("--no-ray", action="store_true", help="the local executor only")
    args = parser.parse_args()
    sizes = [4096 + 64 * i for i in range(args.keys)]
    executors = ["local"] + ([] if args.no_ray else ["ray"])
    if "ray" in executors:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # started once, outside the timings
    load_before = os.getloadavg()[0]
    times: dict[str, dict[int, tuple[float, float]]] = {}
    for executor in executors:
        for workers in (1, 2):
            times.setdefault(executor, {})[workers] = run(executor, workers, sizes)
    rows = []
    for executor, by_workers in times.items():
        for workers, (wall, tuning) in by_workers.items():
            eff = "" if workers == 1 else f"{by_workers[1][0] / (2 * wall):.2f}"
            eff_tuning = "" if workers == 1 else f"{by_workers[1][1] / (2 * tuning):.2f}"
            rows.append([executor, workers, f"{wall:.1f}", f"{tuning:.1f}", eff, eff_tuning])
    print(
        f"a sweep of {args.keys} keys x {len(kmod.SPACE)} configs ({'GPU' if GPU else 'CPU interpreter'}) on "
        f"{os.cpu_count()} cores; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (efficiency "
        "needs a free core per worker)"
    )
    print(common.table(["executor", "workers", "wall s", "tuning s", "efficiency", "efficiency (tuning)"], rows))
    if "ray" in times:
        for workers in (1, 2):
            overhead = times["ray"][workers][0] / times["local"][workers][0]
            print(f"Ray over local at {workers} worker(s): {overhead:.2f}x wall")
    common.write_results("bench_sweep", {"keys": args.keys, "times": {k: dict(v) for k, v in times.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
