"""Kernels and argument makers for the sweep tests, importable by module and name as sweep workers need them.
A maker builds its tensors where it runs (the worker's device); `gated_call` lets a test hold a worker inside a
maker (it writes the worker's pid, then waits for a file) to kill it or its driver from outside."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

from autotune import Tuning, autotune
from autotune.compat import autotune as compat_autotune

TUNING = Tuning(isolate="off", compile_workers=0, warmup=0, reps=2, refine_topk=2, refine_reps=1)
ISOLATED = TUNING.replace(isolate="process", trial_timeout_s=60.0)


@autotune(space={"BLOCK": [32, 64, 128]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=TUNING)
@triton.jit
def sweep_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=TUNING)
@triton.jit
def sweep_pair(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@autotune(space={"BLOCK": [32, 64], "MODE": [0, 1]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=ISOLATED)
@triton.jit
def sweep_crashy(x, y, out, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if MODE == 1:  # a wild pointer: the interpreter dies with SIGSEGV
        value = tl.load(x + offs + (1 << 40))
    else:
        value = tl.load(x + offs, mask=mask)
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


def _device() -> str:
    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


def add_call(n: int) -> tuple[tuple, dict]:
    """One shape's arguments, made on this process's device."""
    x = torch.rand(n, device=_device())
    return (x, torch.rand_like(x), torch.empty_like(x), n), {}


def gated_call(n: int, gate: str) -> tuple[tuple, dict]:
    """`add_call(n)`, but the first time (no `gate`/released yet) write this worker's pid to `gate`/pid-<n>
    and wait for `gate`/released: a test kills this worker, or its driver, while it waits."""
    released = Path(gate) / "released"
    if not released.exists():
        (Path(gate) / f"pid-{n}").write_text(str(os.getpid()))
        deadline = time.monotonic() + 120
        while not released.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return add_call(n)


def calls(sizes: list[int]) -> list:
    return [functools.partial(add_call, n) for n in sizes]


@autotune(space={"BLOCK": [32, 64, 128]}, key=["N"], grid="(1,)", tuning=TUNING)
@triton.jit
def sweep_pick(x, out, N: tl.constexpr, BLOCK: tl.constexpr):
    """One config runs for each key (BLOCK == N; the others fail their static assert): a winner timing can't change."""
    tl.static_assert(BLOCK == N)
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs) * 2)


def pick_call(n: int) -> tuple[tuple, dict]:
    x = torch.rand(n, device=_device())
    return (x, torch.empty_like(x)), {"N": n}


def pick_calls(sizes: list[int]) -> list:
    return [functools.partial(pick_call, n) for n in sizes]


def gated_pick(n: int, gate: str) -> tuple[tuple, dict]:
    """`pick_call(n)`, held at `gate` as `gated_call` is."""
    gated_call(n, gate)
    return pick_call(n)


def cli_pick_calls() -> list:
    """What `autotune sweep sweep_kernels:sweep_pick --calls sweep_kernels:cli_pick_calls` tunes."""
    return pick_calls([32, 64])


# -- multi-shape tuning (Tuning.objective): a timing that depends on the shape and the config, deterministically --

# The time of TAG on a call of size n. Each shape's own winner differs (n=1: TAG 1; n=2: TAG 3); the geometric mean
# picks TAG 3 (3.0, against 4.0 and 4.47), the max TAG 2 (5.0, against 16 and 9: no shape's winner), and the
# arithmetic mean would pick TAG 2 too (4.5, against 8.5 and 5.0).
SHAPE_TIMES = {(1, 1): 1.0, (1, 2): 16.0, (2, 1): 4.0, (2, 2): 5.0, (3, 1): 9.0, (3, 2): 1.0}
_LAST_CALL: dict = {}


def _remember_call(**named) -> None:
    _LAST_CALL.clear()
    _LAST_CALL.update(named)


def _shape_times(fn) -> list[float]:
    """Runs the config, then reports SHAPE_TIMES of the tag it wrote and the size of the call it ran on."""
    fn()
    tag, n = int(_LAST_CALL["out"][0]), int(_LAST_CALL["n"])
    return [SHAPE_TIMES[(tag, n)]] * 2


@triton.jit
def shape_tag(out, n, TAG: tl.constexpr):
    tl.store(out, TAG + n * 0)


def shape_tagging(objective: str | None, key: list[str] | None = None, **tuning) -> Callable[[object], object]:
    """The @autotune of a shape_tag kernel: TAG 1..3 (one entry for every call by default), timed by SHAPE_TIMES,
    tuned for `objective`."""
    return autotune(
        space={"TAG": (1, 2, 3)},
        key=key,
        grid="(1,)",
        setup=_remember_call,
        do_bench=_shape_times,
        tuning=TUNING.replace(objective=objective, **tuning),
    )


def shape_tagged(objective: str | None, key: list[str] | None = None, **tuning) -> object:
    """shape_tag decorated by `shape_tagging`."""
    return shape_tagging(objective, key, **tuning)(shape_tag)


@shape_tagging("geomean")
@triton.jit
def sweep_shapes(out, n, TAG: tl.constexpr):
    """shape_tag decorated where it is defined, as a sweep worker imports it."""
    tl.store(out, TAG + n * 0)


@shape_tagging("max", key=["n"])
@triton.jit
def sweep_shapes_by_n(out, n, TAG: tl.constexpr):
    """shape_tag keyed by n and tuned for the max: a sweep's calls fall in one key per n."""
    tl.store(out, TAG + n * 0)


def failing_maker() -> tuple[tuple, dict]:
    raise ValueError("no such shape")


def shape_call(n: int) -> tuple[tuple, dict]:
    return (torch.zeros(1, dtype=torch.int32, device=_device()), n), {}


def shape_calls(sizes: list[int]) -> list:
    return [functools.partial(shape_call, n) for n in sizes]


@triton.jit
def renamed_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


# Decorated under another name: `renamed_add` stays the plain @triton.jit function a worker would import.
renamed = autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=TUNING)(renamed_add)


def failing_add_call(n: int) -> tuple[tuple, dict]:
    raise ValueError(f"no tensors for n={n}")


@autotune(space={"BLOCK": [32, 64]}, key=["n"], tuning=TUNING)
@triton.jit
def sweep_gridless(x, y, out, n, BLOCK: tl.constexpr):
    """No grid= of its own: each call's maker gives it (`grid_call`)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def _grid_of(meta: dict, n: int) -> tuple[int]:
    return (triton.cdiv(n, meta["BLOCK"]),)


def grid_call(n: int) -> tuple[tuple, dict]:
    (args, _) = add_call(n)
    return args, {"grid": functools.partial(_grid_of, n=n)}


@triton.heuristics({"EVEN": lambda named: named["n"] % 2 == 0})
@autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=TUNING)
@triton.jit
def sweep_heuristic(x, y, out, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    """Under triton.heuristics: a worker imports the heuristics object and adds EVEN to each call."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask) + EVEN * 0, mask=mask)


@compat_autotune(
    configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})],
    key=["n"],
    cache_results=False,
)
@triton.jit
def sweep_memory_only(x, y, out, n, BLOCK: tl.constexpr):
    """A triton.autotune drop-in that keeps its winners in memory (cache_results=False)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def cli_gated_pick_calls() -> list:
    """Key 32, then key 64 held at the gate SWEEP_GATE names (a test interrupts `autotune sweep` while it waits)."""
    return [functools.partial(pick_call, 32), functools.partial(gated_pick, 64, os.environ["SWEEP_GATE"])]
