"""The kernels of bench_isolation.py: one vector add over 32 configs, tuned in-process and in a worker."""

import triton
import triton.language as tl

from autotune import Tuning, autotune

SPACE = [{"BLOCK": b, "PASSES": p} for b in (64, 128, 256, 512) for p in range(8)]


@autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(isolate="off", refine_topk=0))
@triton.jit
def in_process(x, y, out, n, BLOCK: tl.constexpr, PASSES: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(x + offs, mask=mask)
    for _ in range(PASSES):
        acc = acc * 1.0
    tl.store(out + offs, acc + tl.load(y + offs, mask=mask), mask=mask)


@autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(isolate="process", refine_topk=0))
@triton.jit
def isolated(x, y, out, n, BLOCK: tl.constexpr, PASSES: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(x + offs, mask=mask)
    for _ in range(PASSES):
        acc = acc * 1.0
    tl.store(out + offs, acc + tl.load(y + offs, mask=mask), mask=mask)
