"""autotune: a decorator-driven JIT autotuner for Triton kernels.

`@autotune(space=..., key=..., grid=...)` above `@triton.jit`: the first call for a key compiles every config
in a thread pool, measures each as soon as it is compiled, launches the fastest and caches it on disk.
"""
from __future__ import annotations

from . import keys
from .cache import CacheWarning, clear_autotune_cache, stats
from .decorator import Autotuned, TuningResult, autotune, autotune_launch
from .distributed import DistributedTuningError
from .errors import AutotuneError, NoValidConfigError, VerificationError
from .options import Tuning
from .precompile import precompile
from .record import Trial, TrialStatus, TuningRecord
from .space import CartesianSpace, Config, FixedSpace, SearchSpace
from .tuner import Reference

__version__ = "0.1.0"

__all__ = [
    "autotune", "autotune_launch", "CartesianSpace", "FixedSpace", "SearchSpace", "Config", "Tuning",
    "TuningResult", "clear_autotune_cache", "precompile", "AutotuneError", "NoValidConfigError",
    "VerificationError", "Reference", "Trial", "TrialStatus", "TuningRecord", "Autotuned", "stats", "keys",
    "CacheWarning", "DistributedTuningError",
]

