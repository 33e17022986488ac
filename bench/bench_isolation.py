"""The cost of `isolate="process"` against in-process tuning: per config and for a 32-config tuning, side by side
in one run (a warm worker: its start, paid once per process, is reported apart).

    python bench/bench_isolation.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

GPU = common.prepare()
os.environ["AUTOTUNE_CACHE_DIR"] = common.scratch_dir("autotune-bench-isolation-")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import isolation_bench_kernel as kmod  # noqa: E402
import torch  # noqa: E402


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    from autotune.engine.isolation.pool import shared_worker

    device = "cuda" if GPU else "cpu"
    worker, _ = shared_worker()
    started = time.perf_counter()
    worker.start()
    worker.load((kmod.__name__, "isolated", "", None), None, 300)
    start_s = time.perf_counter() - started
    rows: list[list[Any]] = []
    results: dict[str, list[float]] = {}
    for round_ in range(2):
        for name in ("in_process", "isolated"):
            kernel = getattr(kmod, name)
            n = 4096 + 64 * round_ + (32 if name == "isolated" else 0)  # a new key each time
            x, y, out = (torch.randn(n, device=device) for _ in range(3))
            began = time.perf_counter()
            kernel(x, y, out, n)
            results.setdefault(name, []).append(time.perf_counter() - began)
    ours = min(results["isolated"])
    base = min(results["in_process"])
    configs = len(kmod.SPACE)
    rows.append(["in-process", f"{base:.2f}", f"{base / configs * 1e3:.1f}", "1.00"])
    rows.append(["isolate='process'", f"{ours:.2f}", f"{ours / configs * 1e3:.1f}", f"{ours / base:.2f}"])
    print(
        f"a {configs}-config tuning ({'GPU' if GPU else 'CPU interpreter'}), best of 2 new keys; worker start "
        f"(Triton and the kernel's module; torch comes with the first trial) {start_s:.1f} s, once per process"
    )
    print(common.table(["mode", "tuning s", "per config ms", "x in-process"], rows))
    common.write_results("bench_isolation", {"tuning_s": results, "worker_start_s": start_s, "configs": configs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
