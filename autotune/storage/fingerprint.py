"""Fingerprints of what a winner depends on: the device, the kernel's source, the Triton and torch versions.

An entry is used only where all of them match: timings and even which configs compile depend on the GPU
model, a changed kernel body may need another winner, and a Triton upgrade changes the generated code.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import os
import re
import textwrap
from typing import Any, Optional

from ..errors import OptionError
from ..space_checksum import code_identity

__all__ = ["device_fingerprint", "source_hash", "runtime_versions", "triton_version"]


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


@functools.lru_cache(maxsize=None)
def _cuda_fingerprint(index: int) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return f"{torch.cuda.get_device_name(index)} sm{major}{minor}"


def device_fingerprint() -> str:
    """The device a winner is valid for: "interpreter" under TRITON_INTERPRET=1 or without CUDA,
    else "<device name> sm<major><minor>" of the current CUDA device.

    Why: timings (and which configs compile at all) depend on the GPU model, so entries are kept per
    device and an entry tuned on another device is never used.
    """
    if _interpreting():
        return "interpreter"
    try:
        import torch

        if not torch.cuda.is_available():
            return "interpreter"
        return _cuda_fingerprint(torch.cuda.current_device())
    except Exception:  # pragma: no cover - a broken CUDA setup; Triton will complain at launch
        return "interpreter"


def _innermost_function(kernel: Any) -> tuple[Any, Optional[str]]:
    """Unwrap autotune/heuristics/JIT layers (`.fn`) down to the Python function; also return the
    first `src` string seen on the way (a JITFunction's source, exactly what Triton compiles)."""
    obj, src = kernel, None
    for _ in range(16):
        if src is None:
            candidate = getattr(type(obj), "src", None)
            if candidate is not None:  # a property on JITFunction; don't trigger __getattr__ magic elsewhere
                value = getattr(obj, "src", None)
                if isinstance(value, str):
                    src = value
        if inspect.isfunction(obj):
            break
        nxt = getattr(obj, "fn", None)
        if nxt is None or nxt is obj:
            break
        obj = nxt
    return obj, src


def _source_text(kernel: Any) -> str:
    fn, src = _innermost_function(kernel)
    if src is not None:
        return src
    try:
        raw = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        if getattr(fn, "__code__", None) is not None:   # made by exec() (Triton's interpreter runs it): its bytecode
            return f"bytecode:{code_identity(fn)}"      # (same Python, same body -> same text) stands for the source
        raise OptionError(f"cannot read the source of kernel {kernel!r} ({exc}), and it is not a Python function: "
                          "autotune keys its cache on the kernel's source; decorate a @triton.jit function") from None
    # As triton.JITFunction does: drop decorators, keep from `def name(` on, so the hash is the same
    # through the interpreter (no `.src`) and the JIT.
    match = re.search(r"^def\s+\w+\s*\(", raw, re.MULTILINE)
    return raw[match.start():] if match else raw


def source_hash(kernel: Any) -> str:
    """sha256 (hex) of a Triton kernel's source: `JITFunction.src`, else the source of the innermost
    Python function with its decorators stripped (the same text, so JIT and interpreter agree); for a kernel
    made by exec(), whose source cannot be read (only the interpreter runs one), its `code_identity` (bytecode,
    constants, annotations).

    Why: a winner tuned for an older version of the kernel body may be wrong or slow for the new one,
    so a changed source invalidates the kernel's cache entries.
    """
    return hashlib.sha256(_source_text(kernel).encode("utf-8")).hexdigest()


def runtime_versions() -> tuple[str, str]:
    """(triton.__version__, torch.__version__): recorded in every entry; a Triton upgrade invalidates."""
    import torch
    import triton

    return str(triton.__version__), str(torch.__version__)



def triton_version() -> str:
    """The running Triton's version (what an entry's `triton_version` must equal)."""
    return runtime_versions()[0]
