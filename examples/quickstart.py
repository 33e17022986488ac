"""Quickstart: tune a vector add over a small search space and print what the tuner measured.

Runs anywhere: on a machine without a CUDA GPU, Triton's CPU interpreter runs the kernel (TRITON_INTERPRET=1
must be set before triton is imported, which this script does for you).

    python examples/quickstart.py
"""

from __future__ import annotations

import os
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autotune import CartesianSpace, Tuning, autotune  # noqa: E402


@autotune(
    space=CartesianSpace(BLOCK=(64, 128, 256, 512), num_warps=(2, 4)).where("$BLOCK // $num_warps >= 32"),
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(preset="fast"),  # measured in this process, on the caller's stream, as triton.autotune
)
@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = 4096 if device == "cuda" else 2048
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    out = torch.empty_like(x)

    add_kernel(x, y, out, n)  # first call for n: tunes every config, launches the winner
    torch.testing.assert_close(out, x + y)
    add_kernel(x, y, out, n)  # same key: the cached winner, no tuning

    print(f"device: {device if device == 'cuda' else 'cpu (Triton interpreter)'}")
    print(f"space: {len(add_kernel.configs)} configs; winner: {add_kernel.best_config}")
    print(add_kernel.report())
    info = add_kernel.cache_info()
    if info["tunings"]:
        how = f"tunings: {info['tunings']}"
    else:  # an earlier run tuned it: this one read its winner from the disk cache
        tuned_on = time.strftime("%Y-%m-%d %H:%M", time.localtime(add_kernel.record().timestamp))
        how = f"read from the cache (tuned on {tuned_on})"
    print(f"{how}, cache hits: {info['hits']}, output matches torch: True")


if __name__ == "__main__":
    main()
