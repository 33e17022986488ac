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


def test_forced_threads_take_a_winner_stored_while_they_ran_prune() -> None:
    """Under force=, a thread that decided to force before another thread stored the key's winner (here: while
    it ran prune=) takes that winner: its baseline is what memory held when it first looked, not after prune=."""
    from autotune import Tuning

    second_in_prune, first_done = threading.Event(), threading.Event()

    def prune(configs, named_args):
        if threading.current_thread().name == "first":
            assert second_in_prune.wait(60)  # the second thread has decided to force and is in prune= now
        else:
            second_in_prune.set()
            assert first_done.wait(60)  # the first thread's winner is stored before this prune= returns
        return configs

    tuned = autotune(
        space={"BLOCK": [16, 32]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        prune=prune,
        tuning=Tuning(force=True, preset="fast", compile_workers=0),
    )(add_kernel)
    x = torch.ones(64)
    outs = {name: torch.empty_like(x) for name in ("first", "second")}
    errors: list[str] = []

    def work() -> None:
        name = threading.current_thread().name
        try:
            tuned(x, x, outs[name], 64)
        except Exception as exc:  # collected, asserted below
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
        finally:
            if name == "first":
                first_done.set()

    threads = [threading.Thread(target=work, name=name) for name in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert tuned.cache_info()["tunings"] == 1  # the second thread took the first one's fresh winner
    assert all(torch.equal(out, 2 * x) for out in outs.values())
