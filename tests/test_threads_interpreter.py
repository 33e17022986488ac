"""Triton's interpreter is not thread-safe; autotune serialises its interpreted launches (#12 item 27), so
threads sharing a tuned kernel behave as they would on a GPU: every launch succeeds with the right result."""

from __future__ import annotations

import threading

import torch
import triton
from kernels_for_tests import add_kernel

from autotune import autotune
from autotune.compat import autotune as compat_autotune

THREADS, CALLS = 8, 12


def _hammer(launch) -> list[str]:
    errors: list[str] = []
    barrier = threading.Barrier(THREADS)

    def work(seed: int) -> None:
        barrier.wait()
        for i in range(CALLS):
            n = 64 + (seed * CALLS + i) % 3  # three keys: tunings and hits interleave across threads
            x = torch.full((n,), float(seed))
            out = torch.empty_like(x)
            try:
                launch(x, out, n)
            except Exception as exc:  # collected, asserted below
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            if not torch.equal(out, 2 * x):
                errors.append(f"wrong result in thread {seed}")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_threads_sharing_a_tuned_kernel_never_fail_in_the_interpreter() -> None:
    tuned = autotune(
        space={"BLOCK": [16, 32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning={"warmup": 0, "reps": 1}
    )(add_kernel)
    assert _hammer(lambda x, out, n: tuned(x, x, out, n)) == []


def test_threads_sharing_a_compat_kernel_never_fail_in_the_interpreter() -> None:
    tuned = compat_autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})], key=["n"])(add_kernel)
    assert _hammer(lambda x, out, n: tuned[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, x, out, n)) == []
