"""autotune: a decorator-driven JIT autotuner for Triton kernels.

`@autotune(space=..., key=..., grid=...)` above `@triton.jit`: the first call for a key compiles the configs
in parallel, measures each as soon as it is compiled (in the caller's process, as triton.autotune; `isolate="process"` for workers), launches
the fastest and caches it on disk.
"""

from __future__ import annotations

from . import keys
from .decorator import Autotuned, autotune
from .errors import (
    ArchiveError,
    AutotuneError,
    CacheEntryError,
    CacheWarning,
    CallError,
    CrashWarning,
    DeviceError,
    DistributedTuningError,
    ExpressionError,
    FailureKind,
    IsolationWarning,
    KeyValueError,
    NoDeviceError,
    NoRecordError,
    NoValidConfigError,
    OptionError,
    PrecompileError,
    SpaceError,
    VerificationError,
    VerificationWarning,
    WorkerShutdownError,
    classify,
)
from .functional import TuningResult, autotune_launch
from .options import Tuning
from .record import Trial, TrialStatus, TuningRecord
from .reference import Reference
from .space import CartesianSpace, Config, FixedSpace, SearchSpace
from .storage import clear_autotune_cache, stats
from .storage.remote import set_remote_cache

__version__ = "0.1.0"

# Loaded on first use, not by `import autotune`: a cache hit needs none of them (start-up is part of the API).
_LAZY = {"precompile": ("autotune.aot", "precompile")}


def __getattr__(name: str) -> object:
    """PEP 562: `autotune.precompile` imports the ahead-of-time compiler the first time it is asked for."""
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


__all__ = [
    "autotune",
    "autotune_launch",
    "CartesianSpace",
    "FixedSpace",
    "SearchSpace",
    "Config",
    "Tuning",
    "TuningResult",
    "clear_autotune_cache",
    "precompile",
    "AutotuneError",
    "NoValidConfigError",
    "VerificationError",
    "Reference",
    "Trial",
    "TrialStatus",
    "TuningRecord",
    "Autotuned",
    "stats",
    "keys",
    "CacheWarning",
    "CrashWarning",
    "DistributedTuningError",
    "SpaceError",
    "ExpressionError",
    "OptionError",
    "PrecompileError",
    "ArchiveError",
    "CacheEntryError",
    "DeviceError",
    "FailureKind",
    "classify",
    "KeyValueError",
    "NoDeviceError",
    "set_remote_cache",
    "IsolationWarning",
    "WorkerShutdownError",
    "CallError",
    "VerificationWarning",
    "NoRecordError",
]
