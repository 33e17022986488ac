"""Kernels for the isolation tests, importable by module and name as a worker needs them. One config loads from
a wild pointer (SIGSEGV in Triton's interpreter), one loops forever; the others add two vectors."""

import os
import signal
import threading
import time
from pathlib import Path

import triton
import triton.language as tl

from autotune import Tuning, autotune
from autotune.engine.compilers import FunctionCompiler

SPACE = [
    {"BLOCK": 64, "MODE": 0},
    {"BLOCK": 128, "MODE": 0},
    {"BLOCK": 32, "MODE": 1},
    {"BLOCK": 32, "MODE": 2},
    {"BLOCK": 256, "MODE": 0},
]


_IMPORTED_AT = time.monotonic()  # when this process (a worker too) imported the kernels


def trial_timeout_s() -> float:
    """The crashy kernels' trial timeout: AUTOTUNE_TEST_TRIAL_TIMEOUT_S, which test_isolation measures on this
    machine as it runs (how long a worker takes to start), else 8 s."""
    return float(os.environ.get("AUTOTUNE_TEST_TRIAL_TIMEOUT_S", "8"))


def tuning(isolate: str) -> Tuning:
    return Tuning(
        isolate=isolate,
        trial_timeout_s=trial_timeout_s(),
        compile_workers=0,
        warmup=0,
        reps=2,
        refine_topk=2,
        refine_reps=2,
    )


@autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=tuning("process"))
@triton.jit
def crashy_add(x, y, out, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if MODE == 1:  # a wild pointer: the interpreter dies with SIGSEGV
        value = tl.load(x + offs + (1 << 40))
    else:
        value = tl.load(x + offs, mask=mask)
    if MODE == 2:  # never ends, on a GPU too: `i += 1` alone let LLVM drop the
        i = 0  # loop (signed overflow is undefined), so MODE 2 ran as an add;
        while i >= 0:  # cycling through 0..6 keeps a real branch back in the PTX
            i = (i + 1) % 7
        value += i
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
            i = (i + 1) % 7
        value += i
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


@autotune(
    space={"BLOCK": [32, 64]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=2, refine_topk=2, refine_reps=1),
)
@triton.jit
def plain_add(x, y, out, n, BLOCK: tl.constexpr = 16):  # a tuned constexpr with a default value
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@autotune(
    space={"BLOCK": [32, 64]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=2, refine_topk=0),
)
@triton.jit
def plain_mul(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * tl.load(y + offs, mask=mask), mask=mask)


def _gate() -> Path:
    return Path(os.environ.get("AUTOTUNE_TEST_GATE_DIR", "/nonexistent"))


def _wait_for(what: str, ready) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the gate was never opened: {what}")
        time.sleep(0.02)


def _gated_compile(config) -> None:
    """A compile that proves the overlap: BLOCK 32 and 64 each wait until two compiles have started (so they run
    at the same time, in two processes); BLOCK 128 waits until a measurement has started (so compiling goes on
    while the measuring worker measures); BLOCK 16 kills its compile worker with SIGSEGV."""
    gate = _gate()
    (gate / f"compile-{config['BLOCK']}-{os.getpid()}").touch()
    if config["BLOCK"] == 16:
        os.kill(os.getpid(), signal.SIGSEGV)
    elif config["BLOCK"] == 128:
        _wait_for("a measurement", lambda: any(gate.glob("measure-*")))
    else:
        _wait_for("a second compile", lambda: len(list(gate.glob("compile-*"))) >= 2)


def _mark_measurement(**named) -> None:
    (_gate() / f"measure-{os.getpid()}").touch()


@autotune(
    space={"BLOCK": [32, 64, 128, 16]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    setup=_mark_measurement,
    tuning=Tuning(isolate="process", trial_timeout_s=120, compile_workers=2, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def gated_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


gated_add.compiler_factory = lambda tuned, prepare: FunctionCompiler(_gated_compile)


SETUP_PIDS: list = []  # os.getpid() of every process that ran default_add's setup= in this interpreter


def _note_pid(**named) -> None:
    SETUP_PIDS.append(os.getpid())


@autotune(
    space={"BLOCK": [32, 64]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    setup=_note_pid,
    tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def default_add(x, y, out, n, BLOCK: tl.constexpr):  # isolate left unset: AUTOTUNE_ISOLATE, else "off"
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def plain_jit_add(x, y, out, n, BLOCK: tl.constexpr):  # autotuned elsewhere: its module name holds the jit kernel
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@autotune(
    space={"BLOCK": [128, 256, 512, 1024]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", compile_workers=2, trial_timeout_s=120, refine_topk=2),
)
@triton.jit
def gpu_add(x, y, out, n, BLOCK: tl.constexpr):  # the GPU test of compile workers + the parent's launch
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def poisoning_verify(x, y, out, n) -> bool:
    """A wrong output stands in for a config that poisons the device: the error a CUDA context gives then."""
    import torch

    if not torch.allclose(out, x + y):
        raise RuntimeError("CUDA error: an illegal memory access was encountered (simulated by the test)")
    return True


@autotune(
    space=[{"BLOCK": 64, "WRONG": 0}, {"BLOCK": 32, "WRONG": 1}, {"BLOCK": 128, "WRONG": 0}],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    verify=poisoning_verify,
    tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def poisoning_add(x, y, out, n, BLOCK: tl.constexpr, WRONG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a, b = tl.load(x + offs, mask=mask), tl.load(y + offs, mask=mask)
    if WRONG:
        tl.store(out + offs, a - b, mask=mask)
    else:
        tl.store(out + offs, a + b, mask=mask)


@triton.jit
def negate(v):
    return -v


@autotune(
    space={"BLOCK": [32, 64]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def apply_add(x, y, out, n, FN: tl.constexpr, BLOCK: tl.constexpr):  # FN: a @triton.jit function (no pickle)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, FN(tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask)), mask=mask)


def _slow_compile(config) -> None:
    """BLOCK 64 never ends; the others note, in AUTOTUNE_TEST_GATE_DIR when set, how long their compile worker
    had had the kernels when they ended (so a test can tell a compile's seconds from its worker's life)."""
    if config["BLOCK"] == 64:
        threading.Event().wait()  # nothing sets it
    if "AUTOTUNE_TEST_GATE_DIR" in os.environ:
        (_gate() / f"compiled-{config['BLOCK']}").write_text(repr(time.monotonic() - _IMPORTED_AT))


@autotune(
    space={"BLOCK": [32, 64, 128]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", compile_workers=2, compile_timeout_s=3, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def slow_compile_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


slow_compile_add.compiler_factory = lambda tuned, prepare: FunctionCompiler(_slow_compile)


def _hanging_compile(config) -> None:
    """BLOCK 64 says it has started (its compile worker's pid in the file AUTOTUNE_TEST_HANG_MARK names), then
    never ends; the others compile at once."""
    if config["BLOCK"] == 64:
        mark = Path(os.environ["AUTOTUNE_TEST_HANG_MARK"])
        mark.with_suffix(".tmp").write_text(str(os.getpid()))
        mark.with_suffix(".tmp").rename(mark)  # the test never reads half a pid
        time.sleep(3600)


@autotune(
    space={"BLOCK": [32, 64, 128]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",  # no timeout of any kind
    tuning=Tuning(isolate="process", compile_workers=2, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def hanging_compile_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


hanging_compile_add.compiler_factory = lambda tuned, prepare: FunctionCompiler(_hanging_compile)


def buggy_verify(x, y, out, n) -> bool:
    import torch

    return torch.allclose(out)  # the user's bug: a TypeError in every config's check, the caller's to fix


@autotune(
    space={"BLOCK": [32, 64]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    verify=buggy_verify,
    tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def buggy_verify_add(x, y, out, n, BLOCK: tl.constexpr):  # isolate left unset: the test sets AUTOTUNE_ISOLATE
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def _unconfigured_toolchain(tuned, prepare):
    raise RuntimeError("my_toolchain is not configured")  # the user's setup, the same for every config


@autotune(
    space={"BLOCK": [32, 64, 128]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", compile_workers=2, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def unconfigured_compiler_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


unconfigured_compiler_add.compiler_factory = _unconfigured_toolchain


@autotune(
    space=[{"BLOCK": 64, "MODE": 0}, {"BLOCK": 128, "MODE": 0}, {"BLOCK": 32, "MODE": 1}, {"BLOCK": 16, "MODE": 1}],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(
        isolate="process", distributed="shard", trial_timeout_s=60.0, compile_workers=0, warmup=0, reps=1, refine_topk=0
    ),
)
@triton.jit
def shard_crashy_add(x, y, out, n, BLOCK: tl.constexpr, MODE: tl.constexpr):  # dealt over 2 ranks: one of
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # each rank's two configs segfaults
    mask = offs < n
    if MODE == 1:
        value = tl.load(x + offs + (1 << 40))
    else:
        value = tl.load(x + offs, mask=mask)
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


@autotune(
    space={"BLOCK": [32, 64]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def strided_add(x, x_stride, y, out, n, BLOCK: tl.constexpr):  # x may be a broadcast view (stride 0)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs * x_stride, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def _sums(x, y, out, n) -> bool:
    import torch

    return bool(torch.allclose(out, x + y))


@autotune(
    space=[{"BLOCK": 32, "WRONG": 0}, {"BLOCK": 64, "WRONG": 1}],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    verify=_sums,
    tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def verified_add(x, y, out, n, BLOCK: tl.constexpr, WRONG: tl.constexpr):  # isolate: the test's AUTOTUNE_ISOLATE
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask) + WRONG, mask=mask)


@autotune(
    space={"BLOCK": [24, 48]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def not_a_power_of_two_add(x, y, out, n, BLOCK: tl.constexpr):  # every config fails the same way (tl.arange)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@autotune(space={"BLOCK": [32, 64]}, key=["n"], tuning=Tuning(compile_workers=0, warmup=0, reps=1))
@triton.jit
def launched_with_a_grid(x, y, out, n, BLOCK: tl.constexpr):
    """Launched as launched_with_a_grid[grid](...): isolated unless its grid cannot be sent."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@autotune(
    space=[{"BLOCK": 64, "MODE": 0}, {"BLOCK": 32, "MODE": 1}, {"BLOCK": 128, "MODE": 0}],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def segfaulting_add(x, y, out, n, BLOCK: tl.constexpr, MODE: tl.constexpr):  # isolate unset: in-process
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # MODE 1 loads from a wild pointer: SIGSEGV
    mask = offs < n
    if MODE == 1:
        value = tl.load(x + offs + (1 << 40))
    else:
        value = tl.load(x + offs, mask=mask)
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


@autotune(
    space=[{"BLOCK": 64, "MODE": 0}, {"BLOCK": 32, "MODE": 2}],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=1, refine_topk=0),  # no trial_timeout_s
)
@triton.jit
def hang_add(x, y, out, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(x + offs, mask=mask)
    if MODE == 2:  # never ends (see crashy_add)
        i = 0
        while i >= 0:
            i = (i + 1) % 7
        value += i
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


def _killed_from_outside(config) -> None:
    """As the OOM killer would: SIGKILL the worker compiling BLOCK 64 the first time only, BLOCK 16 every time."""
    first = not (_gate() / "killed-once").exists()
    if config["BLOCK"] == 16 or (config["BLOCK"] == 64 and first):
        (_gate() / "killed-once").touch()
        os.kill(os.getpid(), signal.SIGKILL)


@autotune(
    space={"BLOCK": [32, 64, 16]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", trial_timeout_s=120, compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def sigkilled_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


sigkilled_add.compiler_factory = lambda tuned, prepare: FunctionCompiler(_killed_from_outside)


@autotune(
    space=[{"BLOCK": 64, "MODE": 0}, {"BLOCK": 32, "MODE": 1}, {"BLOCK": 32, "MODE": 2}, {"BLOCK": 128, "MODE": 0}],
    key=None,
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(isolate="process", objective="max", compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def large_call_crashy_add(x, y, out, n, BLOCK: tl.constexpr, MODE: tl.constexpr):  # one config for a set of calls
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if MODE == 1:  # fine on a call with n < 1000; from a wild pointer (SIGSEGV) on a larger one
        value = tl.load(x + offs + (n // 1000).to(tl.int64) * (1 << 40), mask=mask)
    else:
        value = tl.load(x + offs, mask=mask)
    if MODE == 2:  # fine on a call with n < 1000; never ends on a larger one (see crashy_add)
        i = n // 1000
        while i > 0:
            i = i % 7 + 1
        value += i
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def _crashes_on_fourth_launch(x, y, out, launches, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    seen = tl.load(launches)
    wild = 0
    if BLOCK == 128:  # counts its own launches; from the fourth on it loads from a wild pointer
        tl.store(launches, seen + 1)
        wild = (seen >= 3).to(tl.int64) * (1 << 40)
    tl.store(out + offs, tl.load(x + offs + wild, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


# BLOCK=128 survives its first measurement and crashes in the re-measurement of the best configs (refine).
crashes_in_refine = autotune(
    space={"BLOCK": [32, 64, 128]},
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=3, refine_reps=2, isolate="off"),
)(_crashes_on_fourth_launch)


# An online kernel none of whose configs survives a run (MODE 1: a wild load), and whose fallback= crashes too.
all_crashing_online = autotune(
    space=[{"BLOCK": 32, "MODE": 1}, {"BLOCK": 64, "MODE": 1}],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    fallback={"BLOCK": 16, "MODE": 1},
    tuning=Tuning(mode="online", compile_workers=0, warmup=0, reps=2, refine_topk=0),
)(segfaulting_add.fn)


# poisoning_add measured in this process: its wrong config stops the tuning with DeviceError
poisoning_add_in_process = autotune(
    space=[{"BLOCK": 64, "WRONG": 0}, {"BLOCK": 32, "WRONG": 1}, {"BLOCK": 128, "WRONG": 0}],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    verify=poisoning_verify,
    tuning=Tuning(isolate="off", compile_workers=0, warmup=0, reps=1, refine_topk=0),
)(poisoning_add.fn)


def _fail_when_re_measured(x, y, out, n, arm) -> None:
    """setup= of fails_when_re_measured, once the parent's re-measurement has begun (the test's gate holds
    "refining-<how>"): "segfault" arms the CRASHES config's wild load; "poison" raises the error a poisoned CUDA
    context gives, and "sigkill" kills the worker as the OOM killer would (once, or "sigkill-always"), in
    whichever config runs first."""
    gate = _gate()
    if (gate / "refining-segfault").exists():
        arm.fill_(1 << 40)
    if (gate / "refining-poison").exists():
        raise RuntimeError("CUDA error: an illegal memory access was encountered (simulated by the test)")
    once = (gate / "refining-sigkill").exists() and not (gate / "killed-once").exists()
    if once or (gate / "refining-sigkill-always").exists():
        (gate / "killed-once").touch()
        os.kill(os.getpid(), signal.SIGKILL)


@autotune(
    space=[{"BLOCK": 64, "CRASHES": 1}, {"BLOCK": 64, "CRASHES": 0}],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    setup=_fail_when_re_measured,
    tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=2, refine_topk=2, refine_reps=2),
)
@triton.jit
def fails_when_re_measured(x, y, out, n, arm, BLOCK: tl.constexpr, CRASHES: tl.constexpr):
    """CRASHES 1 is the faster config on its first pass (CRASHES 0 loads y 17 times), and fails only when re-measured."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if CRASHES:
        value = tl.load(x + offs + tl.load(arm), mask=mask)  # arm: 0, until setup= arms it
    else:
        value = tl.load(x + offs, mask=mask)
        for _ in tl.static_range(16):
            value += tl.load(y + offs, mask=mask) * 0.0
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


def _arm_in_the_second_round(x, y, out, n, arm, hang) -> None:
    """setup= of fails_in_a_later_round: once the test's gate holds "refining", count the runs on the call with
    n=200 and arm from the fourth on (the re-measurement's second round on call 1: three configs a round)."""
    gate = _gate()
    if (gate / "refining").exists() and n == 200:
        count = gate / "runs"
        runs = int(count.read_text()) + 1 if count.exists() else 1
        count.write_text(str(runs))
        if runs > 3:
            arm.fill_(1 if hang else 1 << 40)


@autotune(
    space=[{"BLOCK": 64, "TAG": 0}, {"BLOCK": 64, "TAG": 1}, {"BLOCK": 64, "TAG": 2}],
    key=None,
    grid="(cdiv(n, $BLOCK),)",
    setup=_arm_in_the_second_round,
    tuning=Tuning(
        isolate="process", objective="max", compile_workers=0, warmup=0, reps=2, refine_topk=3, refine_reps=3
    ),
)
@triton.jit
def fails_in_a_later_round(x, y, out, n, arm, hang, BLOCK: tl.constexpr, TAG: tl.constexpr):
    """TAG 0 is the fastest, TAG 2 the slowest (8 extra loads per TAG); TAG 1 segfaults, or with hang=1 never ends,
    once armed. One config for a set of calls."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    armed = tl.load(arm)
    value = tl.load(x + offs, mask=mask)
    if TAG == 1:
        if hang == 1:
            i = armed
            while i > 0:
                i = i % 7 + 1
            value += i
        else:
            value = tl.load(x + offs + armed, mask=mask)
    for _ in tl.static_range(TAG * 8):
        value += tl.load(y + offs, mask=mask) * 0.0
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)
