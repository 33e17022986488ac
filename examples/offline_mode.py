"""Offline mode: tune once, then serve with `AUTOTUNE_OFFLINE=1` so production never tunes.

This script plays both parts:
  1. it tunes `add_kernel` for n = 1024 and the winner lands in the disk cache;
  2. it starts itself again as a subprocess with `AUTOTUNE_OFFLINE=1` (think: the deployed service).
     There, n = 1024 is a cache hit and launches the tuned winner; n = 4096 was never tuned, so it
     launches the `fallback=` config untuned and warns once for that key (not on every call).

The cache directory is AUTOTUNE_CACHE_DIR; when it is not set, the example uses a temporary one so
it leaves nothing behind.  Run:  python examples/offline_mode.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings

try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # noqa: BLE001 - no usable torch CUDA: fall back to the interpreter
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import autotune  # noqa: E402
from autotune import autotune as autotune_decorator  # noqa: E402

DEVICE = "cuda" if os.environ.get("TRITON_INTERPRET", "0") != "1" else "cpu"
TUNED_N, UNTUNED_N = 1024, 4096


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    """out = x + y, BLOCK elements per program."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


# Decorated identically in both processes: same source and space, so the offline process finds the entry.
add = autotune_decorator(
    space={"BLOCK": (64, 128, 256, 512)},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    fallback={"BLOCK": 128},  # what an untuned key launches offline (default: the space's first config)
    tuning={"preset": "fast"},
)(add_kernel)


def launch(n: int) -> bool:
    """Run add for length n; True if the output is right."""
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    out = torch.empty(n, device=DEVICE)
    add(x, y, out, n)
    return torch.allclose(out, x + y)


def tune_then_serve() -> int:
    """Part 1: tune n = TUNED_N here, then run part 2 in a fresh process with AUTOTUNE_OFFLINE=1."""
    assert launch(TUNED_N)
    how = "tuned" if add.cache_info()["tunings"] else "found in the cache (an earlier run tuned)"
    print(
        f"[tuning process] n={TUNED_N} {how}: winner {dict(add.best_config)} of {len(add.configs)} configs, "
        f"stored in {os.environ['AUTOTUNE_CACHE_DIR']}"
    )
    env = {**os.environ, "AUTOTUNE_OFFLINE": "1"}
    child = subprocess.run([sys.executable, __file__, "--serve", str(dict(add.best_config)["BLOCK"])], env=env)
    return child.returncode


def serve(expected_block: int) -> int:
    """Part 2 (AUTOTUNE_OFFLINE=1): a hit launches the stored winner; a miss the fallback, with one warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok_hit = launch(TUNED_N)
        hit_config = dict(add.best_config)
        ok_miss = all(launch(UNTUNED_N) for _ in range(3))  # three calls, one warning
        miss_config = dict(add.best_config)
    offline_warnings = [w for w in caught if "AUTOTUNE_OFFLINE" in str(w.message)]
    counters = autotune.stats()["add_kernel"]
    print(f"[offline process] hit  n={TUNED_N}: launched the stored winner {hit_config}, correct: {ok_hit}")
    print(
        f"[offline process] miss n={UNTUNED_N} (3 calls): launched the fallback {miss_config} untuned, "
        f"correct: {ok_miss}; warnings: {len(offline_warnings)}"
    )
    for w in offline_warnings:
        print(f"    warning: {w.message}")
    print(
        f"[offline process] stats: tunings={counters['tunings']} disk_hits={counters['disk_hits']} "
        f"misses={counters['misses']}"
    )
    good = (
        ok_hit
        and ok_miss
        and hit_config == {"BLOCK": expected_block}
        and miss_config == {"BLOCK": 128}
        and len(offline_warnings) == 1
        and counters["tunings"] == 0
    )
    print(
        "offline mode: hit used the tuned winner, miss used the fallback and warned once"
        if good
        else "offline mode did not behave as expected"
    )
    return 0 if good else 1


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        sys.exit(serve(int(sys.argv[2])))
    if not os.environ.get("AUTOTUNE_CACHE_DIR"):
        with tempfile.TemporaryDirectory(prefix="autotune-offline-") as tmp:
            os.environ["AUTOTUNE_CACHE_DIR"] = tmp
            sys.exit(tune_then_serve())
    sys.exit(tune_then_serve())
