"""Rejecting configs that compute the wrong answer: `verify=Reference(...)` or a callable.

A search space can contain configs that are fast because they are wrong. Here the grid uses floor
division (`n // $BLOCK`) instead of `cdiv`, a classic slip: with n = 96 the BLOCK=64 config launches
one program and leaves the last 32 elements unwritten, while BLOCK=16 and 32 divide 96 and are
correct. With `verify=` every config's output is checked after its first trial run; a config that
fails is skipped with a warning, recorded as `verify_failed`, and can never win.

Runs on a CPU through Triton's interpreter:  python examples/verify_configs.py
"""

from __future__ import annotations

import os
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

from autotune import IsolationWarning, Reference, autotune  # noqa: E402

DEVICE = "cuda" if os.environ.get("TRITON_INTERPRET", "0") != "1" else "cpu"


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    """out = x + y for the BLOCK elements of this program (masked at the tail)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def add_reference(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, n: int, **_: object) -> torch.Tensor:
    """What `out` must hold after the kernel: plain torch, called with the kernel's arguments by name."""
    return x + y


def out_is_sum(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, n: int, **_: object) -> bool:
    """A hand-written check: True when the config's output is right (called after its trial run)."""
    return torch.allclose(out, x + y)


def poison_out(out: torch.Tensor, **_: object) -> None:
    """setup=: fill the output with NaN before every trial run.

    Trials share your `out` tensor. Without this, a config that leaves part of `out` unwritten would
    still pass verification, because the previous config's trial already wrote the right values there.
    """
    out.fill_(float("nan"))


def tuned_add(verify: object) -> object:
    """add_kernel with the buggy grid, tuned over three block sizes with the given `verify=`."""
    return autotune(
        space={"BLOCK": (16, 32, 64)},
        key=["n"],
        grid="(n // $BLOCK,)",  # the bug: should be cdiv(n, $BLOCK)
        verify=verify,
        setup=poison_out,
        # force: tune on every run of the example rather than reuse an earlier run's cached winner
        tuning={"preset": "fast", "force": True},
    )(add_kernel)


def run(label: str, verify: object) -> bool:
    """Tune once with `verify`, print which configs were rejected; True if the winner computes x + y."""
    n = 96
    torch.manual_seed(0)
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    kernel = tuned_add(verify)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(x, y, torch.empty(n, device=DEVICE), n)  # tunes
    for w in caught:
        if not issubclass(w.category, IsolationWarning):  # the script's kernels tune in-process: noted apart
            print(f"  warning: {str(w.message)[:150]}")
    trials = kernel.record().trials
    for trial in trials:
        print(f"  {dict(trial.config)}: {trial.status.value}")
    out = torch.zeros(n, device=DEVICE)
    kernel(x, y, out, n)  # the winner, on a fresh output
    correct = torch.allclose(out, x + y)
    rejected = [dict(t.config) for t in trials if t.status.value == "verify_failed"]
    print(f"{label}: rejected {rejected}, winner {dict(kernel.best_config)}, output correct: {correct}")
    return correct


def main() -> None:
    """The same buggy space unverified, verified against a torch reference, and with a callable."""
    unverified = run("verify=None", None)
    print(
        "  (without verify, the fastest config wins even though it is wrong)"
        if not unverified
        else "  (without verify, a correct config happened to be fastest this time)"
    )
    assert run(
        "verify=Reference(add_reference, outputs=('out',))",
        Reference(add_reference, outputs=("out",), atol=1e-6, rtol=1e-6),
    )
    assert run("verify=out_is_sum", out_is_sum)
    print("verification rejected the wrong config; the winners compute x + y")


if __name__ == "__main__":
    main()
