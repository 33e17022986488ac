"""One explicit-target `triton.compile` of a specialization, described as plain data for the report; and
where Triton's compile cache is.

Why its own module: the same compile runs in this process (a JIT kernel) and in a helper process (under
TRITON_INTERPRET=1, see `helpers`), and the JIT path (`targets=None`) describes its compiled kernels the
same way.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .amdgcn import amdgcn_resource_usage
from .cubin import cubin_resource_usage
from .events import LISTENER
from .targets import Target

__all__ = ["compile_source", "describe_compiled", "triton_cache_dir"]


def compile_source(
    jit_fn: Any, target: Target, signature: dict, constexprs: dict, attrs: dict, options: dict
) -> dict[str, Any]:
    """`triton.compile` one specialization for `target`; returns what the report needs (plain data)."""
    import triton
    from triton.compiler import ASTSource

    src = ASTSource(jit_fn, signature, constexprs, attrs)
    events = LISTENER.capture()
    started = time.perf_counter()
    try:
        compiled = triton.compile(src, target=target.gpu_target(), options=options)
    finally:
        LISTENER.release()
    seconds = time.perf_counter() - started
    return describe_compiled(compiled, target, seconds, events[-1][1] if events else None)


def describe_compiled(compiled: Any, target: Target, seconds: float, cached: bool | None) -> dict[str, Any]:
    """A compiled kernel's hash, shared memory, warps, registers and frame (from the cubin or the AMDGCN) and cache
    directory."""
    metadata = compiled.metadata
    group = getattr(compiled, "metadata_group", None) or {}
    path = next((os.path.dirname(p) for name, p in group.items() if name.endswith(".json")), None)
    usage: dict[str, int | None] = {"n_regs": None, "frame_bytes": None}
    if target.backend == "cuda":
        try:
            binary = compiled.asm.get("cubin")
        except Exception:  # noqa: BLE001 - a missing asm entry only loses the register count
            binary = None
        if isinstance(binary, (bytes, bytearray)):
            usage = cubin_resource_usage(bytes(binary))
    elif target.backend == "hip":
        text = getattr(compiled, "asm", {}).get("amdgcn")
        if isinstance(text, str):
            usage = amdgcn_resource_usage(text)
    return {
        "hash": getattr(compiled, "hash", None),
        "cached": cached,
        "seconds": seconds,
        "shared": getattr(metadata, "shared", None),
        "num_warps": getattr(metadata, "num_warps", None),
        "warp_size": getattr(metadata, "warp_size", None) or target.warp_size,
        "path": path,
        **usage,
    }


def triton_cache_dir() -> str:
    """Triton's compile cache directory in use (`triton.knobs.cache.dir`: TRITON_CACHE_DIR, else ~/.triton/cache)."""
    from triton import knobs

    return str(knobs.cache.dir)
