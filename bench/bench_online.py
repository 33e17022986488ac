"""Online against blocking tuning: the latency of the first call for a new key (ratio), and how many calls online
tuning takes to decide. CPU part through the interpreter (always); on a GPU the same with real launches.

    python bench/bench_online.py [--configs 8] [--keys 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

GPU = common.prepare()

import os  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def scaled_add(x, y, out, n, BLOCK: tl.constexpr, PASSES: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(x + offs, mask=mask)
    for _ in range(PASSES):
        acc = acc * 1.0
    tl.store(out + offs, acc + tl.load(y + offs, mask=mask), mask=mask)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--keys", type=int, default=3, help="new keys measured per mode (medians reported)")
    args = parser.parse_args()
    os.environ["AUTOTUNE_CACHE_DIR"] = common.scratch_dir("autotune-bench-online-")
    from autotune import Tuning, autotune

    device = "cuda" if GPU else "cpu"
    space = {"BLOCK": [128, 256], "PASSES": list(range(0, 4 * (args.configs // 2), 4))}
    first_ms: dict[str, list[float]] = {"blocking": [], "online": []}
    calls_to_decide: list[int] = []
    for mode in ("blocking", "online"):
        kernel = autotune(
            space=space, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(mode=mode, reps=5, refine_topk=0)
        )(scaled_add)
        for k in range(args.keys):
            n = 4096 + 128 * k + (64 if mode == "online" else 0)  # new keys for each mode
            x, y, out = (torch.randn(n, device=device) for _ in range(3))
            started = time.perf_counter()
            kernel(x, y, out, n)
            if GPU:
                torch.cuda.synchronize()
            first_ms[mode].append((time.perf_counter() - started) * 1e3)
            if mode == "online":
                calls = 1
                while kernel.cache.in_memory((n,), (str(x.dtype),) * 3) is None and calls < 10_000:
                    kernel(x, y, out, n)
                    calls += 1
                calls_to_decide.append(calls)
    blocking, online = statistics.median(first_ms["blocking"]), statistics.median(first_ms["online"])
    rows = [
        ["blocking (tune on the first call)", f"{blocking:.1f}", "1.00", "1"],
        [
            "online (tune across calls)",
            f"{online:.1f}",
            f"{online / blocking:.3f}",
            f"{statistics.median(calls_to_decide):.0f}",
        ],
    ]
    print(
        f"first call for a new key, {len(space['BLOCK']) * len(space['PASSES'])} configs, reps=5, "
        f"{'GPU' if GPU else 'CPU interpreter'}, medians of {args.keys} keys"
    )
    print(common.table(["mode", "first call ms", "x blocking", "calls to decide"], rows))
    common.write_results(
        "bench_online",
        {
            "first_call_ms": first_ms,
            "calls_to_decide": calls_to_decide,
            "ratio_online_over_blocking": online / blocking,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
