"""autotune: a decorator-driven JIT autotuner for Triton kernels."""
from __future__ import annotations

from .errors import AutotuneError, NoValidConfigError, VerificationError
from .options import Tuning
from .space import Config

__version__ = "0.1.0"
