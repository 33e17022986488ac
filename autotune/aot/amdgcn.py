"""Registers and scratch of an AMD kernel, read from the AMDGCN assembly Triton keeps (`compiled.asm["amdgcn"]`).

Why: as for a cubin (`cubin.py`), an explicit-target compile has no GPU to load the kernel on and ask; the code
object's metadata (`.vgpr_count`, `.private_segment_fixed_size`) says what the compiler allocated.
"""

from __future__ import annotations

import re

__all__ = ["amdgcn_resource_usage"]

_FIELD = re.compile(r"^\s*\.(vgpr_count|private_segment_fixed_size):\s*(\d+)\s*$", re.MULTILINE)


def amdgcn_resource_usage(text: str) -> dict[str, int | None]:
    """{"n_regs": VGPRs per thread, "frame_bytes": scratch bytes per thread (> 0: spills)}; None where absent."""
    found = {name: int(value) for name, value in _FIELD.findall(text)}
    return {"n_regs": found.get("vgpr_count"), "frame_bytes": found.get("private_segment_fixed_size")}
