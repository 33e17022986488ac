"""Which config fields are Triton compile options (num_warps, maxnreg, waves_per_eu, ...) rather than a kernel's
meta-parameters: the keywords a launch accepts besides the kernel's arguments."""

from __future__ import annotations

import dataclasses
import functools

from .occupancy import FIELD as OCCUPANCY

# Options every Triton backend understands, named even where a backend's dataclass is not importable.
_BASE_COMPILE_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})
# Fields of backends' option dataclasses that are Triton internals, not per-config tuning knobs.
_INTERNAL_OPTION_FIELDS = frozenset(
    {
        "arch",
        "backend_name",
        "debug",
        "extern_libs",
        "supported_fp8_dtypes",
        "deprecated_fp8_dot_operand_dtypes",
        "default_dot_input_precision",
        "allowed_dot_input_precisions",
        "max_num_imprecise_acc_default",
        "instrumentation_mode",
        "fpsan_homomorphic_casts",
        "warp_size",
        "ptx_version",
        "sanitize_overflow",
    }
)


@functools.cache
def backend_option_fields() -> frozenset[str]:
    """Every field of the installed backends' options dataclasses (CUDA, HIP, ...), plus the options every backend
    understands: the keywords a launch accepts besides the kernel's arguments."""
    names = set(_BASE_COMPILE_OPTIONS)
    try:
        from triton.backends import backends
    except Exception:  # pragma: no cover - a Triton without the backends registry
        return frozenset(names)
    for backend in backends.values():
        module = __import__(backend.compiler.__module__, fromlist=["*"])
        for value in vars(module).values():
            if dataclasses.is_dataclass(value) and isinstance(value, type) and value.__name__.endswith("Options"):
                names.update(f.name for f in dataclasses.fields(value))
    return frozenset(names)


@functools.cache
def compile_option_names() -> frozenset[str]:
    """Config fields that are compile options rather than kernel meta-parameters: the backends' option fields
    without Triton's internals, so that a space written for one vendor (`waves_per_eu` on AMD) validates on a
    machine without that GPU; and autotune's `occupancy`, lowered to one of them when compiled (occupancy.py)."""
    return (backend_option_fields() - _INTERNAL_OPTION_FIELDS) | {OCCUPANCY}
