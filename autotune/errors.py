"""Every error and warning autotune raises, and `classify`: what a failure during tuning means.

One module, imported by every layer and importing nothing of autotune, so that a user can catch any of these
from `autotune` and each layer raises the class that blames the right thing: the space, the options, the
call, a config, the cache, the environment.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import warnings
from collections.abc import Collection
from enum import Enum
from types import FrameType
from typing import Any


class AutotuneError(Exception):
    """Base class of every error autotune raises on purpose."""


class UserCodeError(AutotuneError):
    """A compat user's hook or `do_bench` raised while tuning. Not a config's failure: triton.autotune raises
    it as is, and so does the drop-in (`Autotuner.run` re-raises `original`). Only escapes to a thread that
    waited on another thread's tuning of the same key."""

    def __init__(self, message: str, original: BaseException) -> None:
        super().__init__(message)
        self.original = original


class SpaceError(AutotuneError, ValueError):
    """A search space or config is malformed (raised when decorating where possible)."""


class ExpressionError(AutotuneError, ValueError):
    """A `$X` expression string is malformed or names something that does not exist."""


class OptionError(AutotuneError, ValueError):
    """Options conflict or are invalid (e.g. a static option that is also a space field)."""


class NoValidConfigError(AutotuneError, RuntimeError):
    """Every config of the space failed; the message lists each config's error. `of_the_call`: they all failed
    with one error when run, which the call's arguments may cause (another call of the key may succeed)."""

    def __init__(self, message: str, trials: list | None = None, *, of_the_call: bool = False) -> None:
        super().__init__(message)
        self.trials = list(trials or [])
        self.of_the_call = of_the_call


class CallError(AutotuneError, TypeError):
    """A call does not fit what it calls: a missing, extra, doubled or unknown argument to a tuned kernel or to
    autotune's functions (a `TypeError`, as Python's own call errors are, so code written for Triton still
    catches it)."""


class KeyValueError(AutotuneError, ValueError):
    """A call's key value cannot identify a cache entry (a tensor, NaN, an object without a stable text form)."""


class NoRecordError(AutotuneError, KeyError):
    """A kernel was asked for the tuning record of a key it has not tuned or read in this process (`record()`,
    `report()`). A `KeyError`, as a missing mapping key is; its text is the message, not KeyError's quoted repr."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class VerificationError(AutotuneError, AssertionError):
    """A config's output did not match the reference given to `verify=`."""


class DeviceError(AutotuneError, RuntimeError):
    """The GPU context is poisoned (illegal address, launch failure): no later launch in this process can be
    trusted, so the tuning stops instead of blaming the remaining configs."""


class WorkerShutdownError(AutotuneError, RuntimeError):
    """autotune's worker processes were stopped (`autotune.isolation.shutdown()`, or the process exiting) while a
    tuning was using them: the tuning ends, nothing is stored, and no config is blamed."""


class NoDeviceError(AutotuneError, RuntimeError):
    """No GPU driver is active and Triton's CPU interpreter is off: nothing can compile or run a kernel here.
    The environment is at fault, not a config, so it is raised once, before any config is tried."""


class CacheWarning(UserWarning):
    """Something went wrong with the tuning cache; the launch went on (tuning in memory)."""


class IsolationWarning(UserWarning):
    """A kernel is tuned in the caller's process because no worker can run it (`isolate="auto"`): said once
    per kernel. Filter this category to silence it, or pass `isolate="off"`."""


class CaptureWarning(UserWarning):
    """A kernel met a key with no tuned winner during CUDA-graph capture and launched an untuned config (capture.py):
    said once per kernel. Warm the keys up before capturing (`autotune.warmup`, or one eager call per shape)."""


class CrashWarning(UserWarning):
    """A config ended a process that measured it in-process (the crash journal says so): it is recorded as
    `crashed` and not tried again until AUTOTUNE_FORCE=1, clear_autotune_cache() or `autotune cache clear`. Said
    once per config."""


class VerificationWarning(UserWarning):
    """A config failed `verify=` and was skipped (its trial keeps the reason): said where the kernel was called.
    Filter this category to silence it."""


def warn_verification_failed(kernel: str, config: Any, reason: Any) -> None:
    """The one wording of a config skipped by `verify=`, in process or from an isolated worker's trial."""
    warn_at_caller(
        f"autotune: {kernel} config {dict(config)} failed verification and is skipped: {reason}", VerificationWarning
    )


class CacheEntryError(AutotuneError, ValueError):
    """A cache entry could not be used: corrupt, truncated, or of another schema version."""

    def __init__(self, message: str, kind: str = "corrupt", schema_version: Any = None) -> None:
        super().__init__(message)
        self.kind = kind  # "corrupt", "schema" or "future" (dated ahead of this clock)
        self.schema_version = schema_version


class PrecompileError(AutotuneError, ValueError):
    """precompile() cannot start: a bad target, signature, kernel or missing winners (the message says the fix)."""


class ArchiveError(AutotuneError, ValueError):
    """An archive cannot be exported or imported: unsafe or corrupt members, a version mismatch, nothing to export."""


class DistributedTuningError(AutotuneError, RuntimeError):
    """The ranks could not agree on a winner: a collective failed or timed out, the ranks were at
    different keys, or a rank's tuning raised. The message names this rank, the kernel, the key,
    the mode and the step."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TRITON_RUNTIME = f"{os.sep}triton{os.sep}runtime{os.sep}"  # kernel[grid](...) enters through Triton's lambda


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn with the location of the first frame outside the autotune package and Triton's launch wrappers
    (`KernelInterface.__getitem__`, `triton.heuristics`): the user's line that launched the kernel, not the library
    line that noticed the problem."""
    level = 1
    frame: FrameType | None = sys._getframe(0)
    while frame is not None and (
        frame.f_code.co_filename.startswith(_PACKAGE_DIR) or _TRITON_RUNTIME in frame.f_code.co_filename
    ):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def closest_name(name: str, valid: Collection[str]) -> str | None:
    """The valid name closest to `name` (a case-only difference first), or None when none is close."""
    names = sorted(str(v) for v in valid)
    same_but_case = [v for v in names if v.lower() == name.lower() and v != name]
    close = same_but_case or difflib.get_close_matches(name, names, n=1)
    return close[0] if close else None


def did_you_mean(name: str, valid: Collection[str]) -> str:
    """ " Did you mean 'x'?" naming the valid name closest to `name`, or "": every message about an unknown name
    ends with it."""
    close = closest_name(name, valid)
    return f" Did you mean {close!r}?" if close else ""


class FailureKind(str, Enum):
    """What a failure during tuning means, and so what the tuner does with it."""

    CONFIG = "config"  # this config's own compile/launch/verify error: record it, skip it
    OUT_OF_RESOURCES = "out_of_resources"  # the config needs more shared memory/registers than the device has
    STICKY_DEVICE = "sticky_device"  # the device context is dead: abort the tuning with DeviceError
    CALL = "call"  # the caller's or the program's mistake: raise it at once


# CUDA errors after which every later launch in the process fails (the context is poisoned). The patterns are
# compiled at their first use (re's own cache), not at import: only a failure reads them.
_STICKY = (
    r"illegal memory access|misaligned address|unspecified launch failure|device-side assert|illegal instruction"
    r"|CUDA_ERROR_(ILLEGAL_ADDRESS|LAUNCH_FAILED|MISALIGNED_ADDRESS|ILLEGAL_INSTRUCTION|HARDWARE_STACK_ERROR)"
    r"|hipErrorIllegalAddress|hipErrorLaunchFailure"
)

# Python's own messages for a call that does not fit a signature.
_CALL_MISTAKE = (
    r"missing \d+ required|got multiple values for|unexpected keyword argument"
    r"|takes \d+ positional arguments? but \d+"
)


def classify(exc: BaseException, stage: str) -> FailureKind:
    """Decide what `exc`, raised while compiling (`stage="compile"`), running (`"run"`), verifying
    (`"verify"`) or timing (`"measure"`) one config, means for the tuning.

    Only a config's own failures are recorded and skipped. A poisoned device aborts the tuning; a mistake in
    the call or the program (an autotune error other than a failed verification, a signature mismatch, the
    process running out of host memory, an interrupt) is raised as is, since no other config can fix it.
    """
    if not isinstance(exc, Exception) or isinstance(exc, MemoryError):
        return FailureKind.CALL
    if isinstance(exc, VerificationError):
        return FailureKind.CONFIG
    if isinstance(exc, DeviceError) or re.search(_STICKY, str(exc), re.IGNORECASE):
        return FailureKind.STICKY_DEVICE
    if type(exc).__name__ == "OutOfResources" or "out of resource" in str(exc).lower():
        return FailureKind.OUT_OF_RESOURCES
    if isinstance(exc, AutotuneError):
        return FailureKind.CALL
    if stage != "compile" and isinstance(exc, TypeError) and re.search(_CALL_MISTAKE, str(exc)):
        return FailureKind.CALL
    return FailureKind.CONFIG


def device_error_text(exc: BaseException) -> str:
    """`Type: message` of the device's own error: the one a DeviceError wraps (not its in-process advice), else
    `exc`'s."""
    cause = exc.__cause__ if isinstance(exc, DeviceError) and exc.__cause__ is not None else exc
    return f"{type(cause).__name__}: {cause}"
