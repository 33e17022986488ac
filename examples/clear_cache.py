"""Inspecting and clearing tuned winners: `clear_autotune_cache` in its forms, and `autotune cache list`.

Winners live in memory (per decorated kernel) and on disk (one JSON file per kernel, device and key,
under AUTOTUNE_CACHE_DIR). This script tunes two kernels for a few keys, lists the disk cache with
the CLI, then clears it piece by piece:

    clear_autotune_cache(kernel, key=(n,))   one key of one kernel (every dtype variant of it)
    clear_autotune_cache(kernel)             one kernel (the decorated object, or its name as a string)
    clear_autotune_cache()                   everything, every kernel

Each call returns the number of entries removed, memory and disk together (an entry in both counts
once). The CLI equivalents are `autotune cache list` and `autotune cache clear [--kernel K [--key KEY]]`
(or `python -m autotune ...`). The last step wipes the whole cache directory, so this example always
works in a temporary directory of its own, whatever AUTOTUNE_CACHE_DIR says.

    python examples/clear_cache.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

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

from autotune import autotune, clear_autotune_cache  # noqa: E402

DEVICE = "cuda" if os.environ.get("TRITON_INTERPRET", "0") != "1" else "cpu"
SETTINGS = dict(space={"BLOCK": (64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning={"preset": "fast"})


@autotune(**SETTINGS)
@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    """out = x + y."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@autotune(**SETTINGS)
@triton.jit
def scale_kernel(x, out, n, BLOCK: tl.constexpr):
    """out = 2 * x."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, 2 * tl.load(x + offs, mask=mask), mask=mask)


def cache_list() -> None:
    """Show the disk cache the way a user would: `python -m autotune cache list`."""
    print("$ python -m autotune cache list")
    listing = subprocess.run([sys.executable, "-m", "autotune", "cache", "list"], capture_output=True, text=True)
    print(listing.stdout.rstrip() or listing.stderr.rstrip())


def tune_everything() -> None:
    """Tune add_kernel for n = 256 in float32 and float64 and n = 512; scale_kernel for n = 256."""
    for n, dtype in ((256, torch.float32), (256, torch.float64), (512, torch.float32)):
        x, y = torch.randn(n, device=DEVICE, dtype=dtype), torch.randn(n, device=DEVICE, dtype=dtype)
        add_kernel(x, y, torch.empty_like(x), n)
    x = torch.randn(256, device=DEVICE)
    scale_kernel(x, torch.empty_like(x), 256)


def main() -> None:
    """Tune, list, and clear with each form of clear_autotune_cache."""
    tune_everything()
    cache_list()

    removed = clear_autotune_cache(add_kernel, key=(256,))  # both dtypes of n=256
    print(f"clear_autotune_cache(add_kernel, key=(256,)) removed {removed} entries (float32 and float64)")
    assert removed == 2

    removed = clear_autotune_cache("scale_kernel")  # by name: also works in another process
    print(f"clear_autotune_cache('scale_kernel') removed {removed} entry")
    assert removed == 1
    cache_list()

    tune_everything()  # the cleared keys tune again
    removed = clear_autotune_cache(add_kernel)
    print(f"clear_autotune_cache(add_kernel) removed {removed} entries")
    assert removed == 3

    removed = clear_autotune_cache()
    print(f"clear_autotune_cache() removed {removed} entry (everything left)")
    assert removed == 1
    cache_list()
    print("cache cleared: by key, by kernel, and everything")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="autotune-clear-") as tmp:
        os.environ["AUTOTUNE_CACHE_DIR"] = tmp  # never clear the user's real cache
        main()
