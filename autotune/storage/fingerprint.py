"""Fingerprints of what a winner depends on: the device, the kernel's source (with its helpers and the constants it
reads), the Triton and torch versions.

An entry is used only where all of them match: timings and even which configs compile depend on the GPU
model, a changed kernel body may need another winner, and a Triton upgrade changes the generated code.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

from ..kernel_source import kernel_source_text

__all__ = ["device_fingerprint", "source_hash", "runtime_versions", "triton_version"]


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


@functools.cache
def _cuda_fingerprint(index: int) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return f"{torch.cuda.get_device_name(index)} sm{major}{minor}"


def device_fingerprint() -> str:
    """The device a winner is valid for: AUTOTUNE_DEVICE_KIND when set (a name given to this process's device:
    a pool whose machines should file entries apart, or a simulated mixed pool), else "interpreter" under
    TRITON_INTERPRET=1 or without CUDA, else "<device name> sm<major><minor>" of the current CUDA device.

    Why: timings (and which configs compile at all) depend on the GPU model, so entries are kept per
    device and an entry tuned on another device is never used.
    """
    named = os.environ.get("AUTOTUNE_DEVICE_KIND", "").strip()
    if named:
        return named
    if _interpreting():
        return "interpreter"
    try:
        import torch

        if not torch.cuda.is_available():
            return "interpreter"
        return _cuda_fingerprint(torch.cuda.current_device())
    except Exception:  # pragma: no cover - a broken CUDA setup; Triton will complain at launch
        return "interpreter"


def source_hash(kernel: Any) -> str:
    """sha256 (hex) of a Triton kernel's identity text (`kernel_source.kernel_source_text`): its source, the
    `@triton.jit` helpers it calls and the global and closed-over values it reads.

    Why: a winner tuned for an older version of the kernel body (or of a helper, or with another value of a
    constant it reads) may be wrong or slow for the new one, so a change invalidates the kernel's cache entries.
    """
    return hashlib.sha256(kernel_source_text(kernel).encode("utf-8")).hexdigest()


def runtime_versions() -> tuple[str, str]:
    """(triton.__version__, torch.__version__): recorded in every entry; a Triton upgrade invalidates."""
    import torch
    import triton

    return str(triton.__version__), str(torch.__version__)


def triton_version() -> str:
    """The running Triton's version (what an entry's `triton_version` must equal)."""
    return runtime_versions()[0]
