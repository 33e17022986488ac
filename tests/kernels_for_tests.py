"""Small Triton kernels shared by the tests (run through the interpreter on a CPU)."""

from __future__ import annotations

import threading

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def scale_2d_kernel(x, out, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = 2 * x over a 2-D grid of BLOCK_M x BLOCK_N tiles."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride_m + rn[None, :]
    tl.store(out + offs, 2 * tl.load(x + offs, mask=mask), mask=mask)


@triton.jit
def accumulate_kernel(x, acc, n, BLOCK: tl.constexpr):
    """In place: acc += x. Run twice, it adds twice: tuning must restore `acc` between trials."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(acc + offs, tl.load(acc + offs, mask=mask) + tl.load(x + offs, mask=mask), mask=mask)


@triton.jit
def add_wrong_when_64_kernel(x, y, out, n, BLOCK: tl.constexpr):
    """Adds, except that the BLOCK=64 config subtracts: a config that is wrong on purpose."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x + offs, mask=mask)
    b = tl.load(y + offs, mask=mask)
    if BLOCK == 64:
        tl.store(out + offs, a - b, mask=mask)
    else:
        tl.store(out + offs, a + b, mask=mask)


def record_launches(kernel, *fields: str) -> list:
    """Wrap an autotuned kernel's `fn.run` (every launch of an in-process tuning and after it) to record, per
    launch, the tuple of the values it was given for `fields`."""
    launches = []
    real = kernel.fn.run

    def recording(*args, **kwargs):
        launches.append(tuple(kwargs.get(name) for name in fields))
        return real(*args, **kwargs)

    kernel.fn.run = recording
    return launches


def count_trials(kernel) -> list:
    """Wrap an autotuned kernel's `run_trial` to record each config it tries (what a test asserts was, or was not,
    run before an error)."""
    tried = []
    run_trial = kernel.run_trial

    def counted(config, *args, **kwargs):
        tried.append(config)
        return run_trial(config, *args, **kwargs)

    kernel.run_trial = counted
    return tried


def add_and_check(kernel, n: int) -> None:
    """Launch an autotuned add_kernel with x = y = 0..n-1 and check that out is 2x."""
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    kernel(x, x, out, n)
    assert torch.equal(out, 2 * x)


def calling_thread(kernel, n: int, errors: list, name: str | None = None) -> threading.Thread:
    """A thread (not started) running `add_and_check(kernel, n)`, keeping what it raised in `errors` for the test to
    assert: an exception in a thread is no failure of the test by itself."""

    def call() -> None:
        try:
            add_and_check(kernel, n)
        except BaseException as exc:  # asserted by the test
            errors.append(exc)

    return threading.Thread(target=call, name=name)


@triton.jit
def acc_tile_kernel(x, out, n, BM: tl.constexpr, BN: tl.constexpr):
    """A BM x BN fp32 accumulator: at 128 x 128 with 4 warps, about 168 registers per thread uncapped on sm_90."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for i in range(n):
        acc = acc * 0.5 + tl.load(x + i * BM * BN + rm[:, None] * BN + rn[None, :])
    tl.store(out + rm[:, None] * BN + rn[None, :], acc)
