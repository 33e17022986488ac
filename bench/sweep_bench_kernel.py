"""The kernel and argument makers of bench_sweep.py: a vector add over 8 configs, one key per size, tuned
in-process in each sweep worker (the sweep's worker is the process boundary)."""

import functools
import os

import torch
import triton
import triton.language as tl

from autotune import Tuning, autotune

SPACE = [{"BLOCK": b, "PASSES": p} for b in (128, 256) for p in range(4)]


@autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(isolate="off", refine_topk=0))
@triton.jit
def bench_add(x, y, out, n, BLOCK: tl.constexpr, PASSES: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(x + offs, mask=mask)
    for _ in range(PASSES):
        acc = acc * 1.0
    tl.store(out + offs, acc + tl.load(y + offs, mask=mask), mask=mask)


def add_call(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, device="cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda")
    return (x, torch.randn_like(x), torch.empty_like(x), n), {}


def calls(sizes: list[int]) -> list:
    return [functools.partial(add_call, n) for n in sizes]
