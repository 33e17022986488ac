"""Tuning an in-place kernel safely: `restore_value=` and `reset_to_zero=`.

Tuning runs every config many times on *your* arguments. A kernel that writes into its inputs
(`acc += x`) or accumulates into an output (`tl.atomic_add(out, ...)`) would otherwise see each
trial pile up on top of the previous ones. With `restore_value=["acc"]` autotune snapshots `acc`
and puts it back before every trial; with `reset_to_zero=["out"]` it zeroes `out` before every
trial. Either way the final launch sees your arguments exactly as passed, so the result equals
one untuned launch.

Runs on a CPU through Triton's interpreter:  python examples/inplace_kernel.py
"""

from __future__ import annotations

import os

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

from autotune import autotune  # noqa: E402

DEVICE = "cuda" if os.environ.get("TRITON_INTERPRET", "0") != "1" else "cpu"
SPACE = {"BLOCK": (32, 64, 128)}


@triton.jit
def accumulate_kernel(x, acc, n, BLOCK: tl.constexpr):
    """In place: acc += x. Launched twice, it adds twice."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(acc + offs, tl.load(acc + offs, mask=mask) + tl.load(x + offs, mask=mask), mask=mask)


@triton.jit
def sum_kernel(x, out, n, BLOCK: tl.constexpr):
    """out[0] += sum(x): each program adds its block's partial sum atomically."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out, tl.sum(tl.load(x + offs, mask=offs < n, other=0.0), axis=0))


def tuned(kernel: object, **safety: object) -> object:
    """The kernel tuned over SPACE, one entry per length `n`.

    The "fast" preset keeps the interpreter quick; `force=True` makes every run of this example really
    tune (instead of reusing the winner an earlier run left in the disk cache).
    """
    return autotune(
        space=SPACE,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning={"preset": "fast", "force": True},
        **safety,
    )(kernel)


def main() -> None:
    """Tune both kernels with and without the safety options and compare with one plain launch."""
    n = 500
    torch.manual_seed(0)
    x = torch.randn(n, device=DEVICE)
    acc0 = torch.randn(n, device=DEVICE)

    # The reference: one plain, untuned Triton launch.
    untuned = acc0.clone()
    accumulate_kernel[(triton.cdiv(n, 64),)](x, untuned, n, BLOCK=64)

    # 1. restore_value: an in-place update tuned safely.
    acc = acc0.clone()
    safe_acc = tuned(accumulate_kernel, restore_value=["acc"])
    safe_acc(x, acc, n)  # tunes (dozens of trial launches), then launches the winner
    ok = torch.equal(acc, untuned)
    print(f"restore_value=['acc']: winner {dict(safe_acc.best_config)}, result == one untuned launch: {ok}")
    assert ok

    # What goes wrong without it: every trial launch added x to acc once more.
    acc = acc0.clone()
    unsafe_acc = tuned(accumulate_kernel)
    unsafe_acc(x, acc, n)
    times = ((acc - acc0) / x).median().item()
    print(
        f"without restore_value: result == one untuned launch: {torch.equal(acc, untuned)} "
        f"(x was added about {times:.0f} times)"
    )

    # 2. reset_to_zero: an atomic accumulation into an output.
    out = torch.zeros(1, device=DEVICE)
    safe_sum = tuned(sum_kernel, reset_to_zero=["out"])
    safe_sum(x, out, n)
    ok = torch.allclose(out, x.sum().reshape(1), rtol=1e-4, atol=1e-4)
    print(
        f"reset_to_zero=['out']: winner {dict(safe_sum.best_config)}, out == sum(x): {ok} "
        f"({out.item():.4f} vs {x.sum().item():.4f})"
    )
    assert ok

    out = torch.zeros(1, device=DEVICE)
    unsafe_sum = tuned(sum_kernel)
    unsafe_sum(x, out, n)
    print(
        f"without reset_to_zero: out == sum(x): {torch.allclose(out, x.sum().reshape(1), rtol=1e-4, atol=1e-4)} "
        f"(out is {out.item() / x.sum().item():.0f} x sum(x))"
    )
    print("in-place tuning is safe: each tuned result equals one untuned launch")


if __name__ == "__main__":
    main()
