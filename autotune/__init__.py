"""autotune: a decorator-driven JIT autotuner for Triton kernels.

`@autotune(space=..., key=..., grid=...)` above `@triton.jit`: the first call for a key compiles every config
in a thread pool, measures each as soon as it is compiled, launches the fastest and caches it on disk.
"""
from __future__ import annotations

from . import keys
from .cache import clear_autotune_cache, stats
from .decorator import Autotuned, TuningResult, autotune, autotune_launch
from .errors import (ArchiveError, AutotuneError, CacheEntryError, CacheWarning, DeviceError, DistributedTuningError,
                     KeyValueError, NoDeviceError,
                     ExpressionError, FailureKind, NoValidConfigError, OptionError, PrecompileError, SpaceError,
                     VerificationError, classify)
from .options import Tuning
from .aot import precompile
from .record import Trial, TrialStatus, TuningRecord
from .space import CartesianSpace, Config, FixedSpace, SearchSpace
from .tuner import Reference

__version__ = "0.1.0"

__all__ = [
    "autotune", "autotune_launch", "CartesianSpace", "FixedSpace", "SearchSpace", "Config", "Tuning",
    "TuningResult", "clear_autotune_cache", "precompile", "AutotuneError", "NoValidConfigError",
    "VerificationError", "Reference", "Trial", "TrialStatus", "TuningRecord", "Autotuned", "stats", "keys",
    "CacheWarning", "DistributedTuningError", "SpaceError", "ExpressionError", "OptionError", "PrecompileError",
    "ArchiveError", "CacheEntryError", "DeviceError", "FailureKind", "classify", "KeyValueError", "NoDeviceError",
]

