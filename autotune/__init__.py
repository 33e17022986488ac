"""autotune: a decorator-driven JIT autotuner for Triton kernels.

`@autotune(space=..., key=..., grid=...)` above `@triton.jit`: the first call for a key compiles the configs
in parallel, measures each as soon as it is compiled (in the caller's process, as triton.autotune; `isolate="process"` for workers), launches
the fastest and caches it on disk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import keys
from .decorator.autotuned import Autotuned, autotune
from .errors import (
    ArchiveError,
    AutotuneError,
    CacheEntryError,
    CacheWarning,
    CallError,
    CaptureWarning,
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
from .lazy import lazy_names
from .options import Tuning
from .record import Trial, TrialStatus, TuningRecord
from .reference import Reference
from .space.spaces import CartesianSpace, Config, FixedSpace, SearchSpace
from .storage.counters import stats
from .storage.remote_config import set_remote_cache

if TYPE_CHECKING:  # what mypy sees; at run time `__getattr__` imports them on first use
    from .aot import precompile
    from .compiled.torch_ops import torch_op
    from .compiled.warm_up import WarmupReport, warmup
    from .decorator.functional import TuningResult, autotune_launch
    from .storage.clear import clear_autotune_cache
    from .sweeps import SweepInterrupted, SweepReport, sweep

__version__ = "0.1.0"

# Loaded on first use, not by `import autotune`: a cache hit needs none of them (start-up is part of the API).
# torch_op imports torch.
_LAZY = {
    "precompile": ("autotune.aot", "precompile"),
    "torch_op": ("autotune.compiled.torch_ops", "torch_op"),
    "warmup": ("autotune.compiled.warm_up", "warmup"),
    "WarmupReport": ("autotune.compiled.warm_up", "WarmupReport"),
    "autotune_launch": ("autotune.decorator.functional", "autotune_launch"),
    "TuningResult": ("autotune.decorator.functional", "TuningResult"),
    "clear_autotune_cache": ("autotune.storage.clear", "clear_autotune_cache"),
    # modules documented at their old top-level path (`from autotune import distributed`)
    "distributed": ("autotune.modes.distributed", None),
    "isolation": ("autotune.isolation", None),
    "sweep": ("autotune.sweeps", "sweep"),
    "SweepReport": ("autotune.sweeps", "SweepReport"),
    "SweepInterrupted": ("autotune.sweeps", "SweepInterrupted"),
}


__getattr__ = lazy_names("autotune", globals(), _LAZY)


def __dir__() -> list[str]:
    """The loaded names and the lazy ones (`_LAZY`), as if all were imported."""
    return sorted({*globals(), *_LAZY})


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
    "sweep",
    "warmup",
    "SweepReport",
    "SweepInterrupted",
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
    "CaptureWarning",
    "WarmupReport",
    "torch_op",
]
