"""Precompile throughput for an explicit target: serial against the compile thread pool, side by side.

Compiles the first N configs of the GPU matmul space (kernels/matmul.py) for one target (default cuda:90;
no GPU needed) into a fresh Triton cache per measurement, with:

- serial:     workers=0, in this process;
- threads:    workers=W (default 2) compile threads, in this process (what precompile does outside the
              interpreter);
- processes:  workers=W threads each driving a helper process (what precompile does under
              TRITON_INTERPRET=1, or with processes=True): part of Triton's compile holds the GIL;
- cache hits: the threads variant again on a warm cache (nothing compiled).

The variants are interleaved round by round (the order rotates); the table gives the median and the best
round of each (the best is the least disturbed by other processes on a shared machine: the load average is
printed and stored).
Triton's one-off start-up (LLVM initialisation, the ptxas version, the helpers' imports) is paid before
measuring and reported on its own line.

    python bench/bench_precompile.py [--configs N] [--workers W] [--rounds R] [--target cuda:90]

Writes bench/results/precompile.json.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Explicit-target compiles need a real JIT, not the interpreter (which cannot generate code).
os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # the default; set to silence Triton 3.9's notice

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

sys.path.insert(0, str(common.ROOT))

from autotune.aot import precompile  # noqa: E402
from kernels import matmul  # noqa: E402

SIGNATURE = {
    "a_ptr": "*fp16",
    "b_ptr": "*fp16",
    "c_ptr": "*fp16",
    "M": "i32:16",
    "N": "i32:16",
    "K": "i32:16",
    "stride_am": "i32:16",
    "stride_ak": 1,
    "stride_bk": "i32:16",
    "stride_bn": 1,
    "stride_cm": "i32:16",
    "stride_cn": 1,
}  # contiguous fp16 A, B, C with sizes that are multiples of 16, as a launch on 4096 x 4096 specializes


def run_variant(kernel, space, target: str, workers: int, processes: bool, cache_dir: str) -> dict:
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    report = precompile(
        kernel, signature=SIGNATURE, targets=[target], space=space, workers=workers, processes=processes
    )
    return {
        "wall_s": report.wall_s,
        "compiled": len(report.compiled),
        "fresh": report.fresh,
        "cache_hits": report.cache_hits,
        "failed": len(report.failed),
        "configs_per_s": report.configs_per_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=16, help="configs of the matmul space to compile")
    parser.add_argument("--workers", type=int, default=2, help="threads / helper processes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--target", default="cuda:90")
    args = parser.parse_args()

    configs = matmul.SPACE.configs()[: args.configs]
    kernel = matmul.make_matmul()
    space = [dict(c) for c in configs]
    load_before = os.getloadavg()[0]
    scratch = Path(tempfile.mkdtemp(prefix="bench-precompile-"))
    try:
        started = time.perf_counter()
        run_variant(kernel, space[-1:], args.target, 0, False, str(scratch / "warm-inproc"))
        warm_inproc = time.perf_counter() - started
        started = time.perf_counter()
        run_variant(kernel, space[-1:] * 1, args.target, args.workers, True, str(scratch / "warm-helpers"))
        # a second config so that every helper has started and compiled once
        run_variant(kernel, space[-2:], args.target, args.workers, True, str(scratch / "warm-helpers2"))
        warm_helpers = time.perf_counter() - started

        variants = [
            ("serial", 0, False),
            (f"threads x{args.workers}", args.workers, False),
            (f"processes x{args.workers}", args.workers, True),
        ]
        results: dict[str, list[dict]] = {name: [] for name, _, _ in variants}
        results["cache hits"] = []
        for r in range(args.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for name, workers, processes in order:
                cache_dir = str(scratch / f"{name.split()[0]}-{r}")
                results[name].append(run_variant(kernel, space, args.target, workers, processes, cache_dir))
                print(f"round {r + 1}/{args.rounds} {name:>14}: {results[name][-1]['wall_s']:.2f} s", flush=True)
            results["cache hits"].append(
                run_variant(kernel, space, args.target, args.workers, False, str(scratch / f"threads-{r}"))
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    load_after = os.getloadavg()[0]
    serial = statistics.median(x["wall_s"] for x in results["serial"])
    serial_best = min(x["wall_s"] for x in results["serial"])
    rows, summary = [], {}
    for name, runs in results.items():
        wall = statistics.median(x["wall_s"] for x in runs)
        best = min(x["wall_s"] for x in runs)
        summary[name] = {
            "wall_s_median": wall,
            "wall_s_best": best,
            "configs_per_s": len(space) / wall,
            "speedup_vs_serial": serial / wall,
            "best_speedup_vs_best_serial": serial_best / best,
            "runs": runs,
        }
        rows.append(
            [
                name,
                len(space),
                runs[0]["fresh"],
                runs[0]["cache_hits"],
                runs[0]["failed"],
                wall,
                best,
                len(space) / wall,
                f"{serial / wall:.2f}x",
                f"{serial_best / best:.2f}x",
            ]
        )
    print()
    print(
        f"precompile {len(space)} matmul configs for {args.target} on {os.cpu_count()} CPUs "
        f"(median of {args.rounds} rounds; start-up before measuring: in-process {warm_inproc:.2f} s, "
        f"{args.workers} helper processes {warm_helpers:.2f} s; 1-min load average {load_before:.1f} before, "
        f"{load_after:.1f} after: other processes compete for the CPUs when it is near or above their count)"
    )
    print(
        common.table(
            [
                "VARIANT",
                "CONFIGS",
                "COMPILED",
                "CACHED",
                "FAILED",
                "MEDIAN_S",
                "BEST_S",
                "CONFIGS/S",
                "VS SERIAL",
                "BEST VS BEST",
            ],
            rows,
        )
    )

    common.RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": "precompile",
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (compiles need no GPU)",
        "versions": common.versions(),
        "commit": common.git_commit(),
        "cpu_count": os.cpu_count(),
        "target": args.target,
        "configs": space,
        "workers": args.workers,
        "rounds": args.rounds,
        "startup_s": {"in_process": warm_inproc, "helpers": warm_helpers},
        "load_average_1min": {"before": load_before, "after": load_after},
        "results": summary,
    }
    path = common.RESULTS / "precompile.json"
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"\nwrote {path.relative_to(common.ROOT)}")


if __name__ == "__main__":
    main()
