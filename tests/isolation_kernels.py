"""Kernels for the isolation tests, importable by module and name as a worker needs them. One config loads from
a wild pointer (SIGSEGV in Triton's interpreter), one loops forever; the others add two vectors."""
import triton
import triton.language as tl

from autotune import Tuning, autotune

SPACE = [{"BLOCK": 64, "MODE": 0}, {"BLOCK": 128, "MODE": 0}, {"BLOCK": 32, "MODE": 1}, {"BLOCK": 32, "MODE": 2},
         {"BLOCK": 256, "MODE": 0}]


def tuning(isolate: str) -> Tuning:
    return Tuning(isolate=isolate, trial_timeout_s=8.0, compile_workers=0, warmup=0, reps=2, refine_topk=2,
                  refine_reps=2)


@autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=tuning("process"))
@triton.jit
def crashy_add(x, y, out, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if MODE == 1:                                   # a wild pointer: the interpreter dies with SIGSEGV
        value = tl.load(x + offs + (1 << 40))
    else:
        value = tl.load(x + offs, mask=mask)
    if MODE == 2:                                   # never ends
        i = 0
        while i >= 0:
            i += 1
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


@autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=tuning("auto"))
@triton.jit
def crashy_add_auto(x, y, out, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if MODE == 1:
        value = tl.load(x + offs + (1 << 40))
    else:
        value = tl.load(x + offs, mask=mask)
    if MODE == 2:
        i = 0
        while i >= 0:
            i += 1
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


@autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)",
          tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=2, refine_topk=2, refine_reps=1))
@triton.jit
def plain_add(x, y, out, n, BLOCK: tl.constexpr = 16):      # a tuned constexpr with a default value
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)",
          tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=2, refine_topk=0))
@triton.jit
def plain_mul(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * tl.load(y + offs, mask=mask), mask=mask)
