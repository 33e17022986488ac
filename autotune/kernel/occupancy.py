"""`occupancy`: the number of blocks a config should keep resident per SM (per CU on AMD), as cuTile writes it.

It is no Triton option: when a config is compiled it is lowered to the knob each backend has for it (`lower`),
a register cap (`maxnreg`) on NVIDIA and `waves_per_eu` on AMD, from the figures of the target's architecture
(`_NVIDIA`, `_AMD`). The interpreter accepts it and does nothing with it. `lowered_options` is what a launch and
an explicit-target compile call; the record and the reports show what it became (`describe`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from msgspec import UNSET, UnsetType

from ..errors import AutotuneError

__all__ = [
    "FIELD",
    "LOWERED_KNOBS",
    "DEFAULT_NUM_WARPS",
    "GpuTarget",
    "OccupancyUnreachable",
    "lower",
    "lowering",
    "lowered_options",
    "describe",
]

FIELD = "occupancy"
LOWERED_KNOBS = ("maxnreg", "waves_per_eu")  # what occupancy lowers to: a config sets one or the other, not both
DEFAULT_NUM_WARPS = 4  # Triton's default on both backends (CUDAOptions, HIPOptions)


class GpuTarget(Protocol):
    """A compilation target: `autotune.aot.Target` or Triton's `GPUTarget` (backend "cuda"/"hip", arch 90 or
    "gfx942")."""

    @property
    def backend(self) -> str: ...

    @property
    def arch(self) -> int | str: ...


class OccupancyUnreachable(AutotuneError):
    """An occupancy a config cannot reach at its num_warps on a target: a failure of that config (out of
    resources: recorded and skipped), the arithmetic in its message."""


class _Nvidia(NamedTuple):  # a NamedTuple, not a frozen dataclass: ~7x cheaper to define at import
    max_warps_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    min_regs_per_thread: int = 24
    reg_unit_per_thread: int = 8  # registers are allocated per warp in units of 256: 8 per thread


# NVIDIA, from the CUDA C++ Programming Guide's "Technical Specifications per Compute Capability" (the figures the
# CUDA Occupancy Calculator uses): 64K 32-bit registers per SM, at most 255 per thread, allocated per warp in
# units of 256; resident warps and blocks per SM as below. min_regs_per_thread: ptxas raises a smaller .maxnreg to
# 24 (measured with the ptxas Triton 3.9 ships, for sm_80 and sm_90), so no cap below it is kept.
_NVIDIA: dict[int, _Nvidia] = {
    70: _Nvidia(max_warps_per_sm=64, max_blocks_per_sm=32),
    72: _Nvidia(max_warps_per_sm=64, max_blocks_per_sm=32),
    75: _Nvidia(max_warps_per_sm=32, max_blocks_per_sm=16),
    80: _Nvidia(max_warps_per_sm=64, max_blocks_per_sm=32),
    86: _Nvidia(max_warps_per_sm=48, max_blocks_per_sm=16),
    87: _Nvidia(max_warps_per_sm=48, max_blocks_per_sm=16),
    89: _Nvidia(max_warps_per_sm=48, max_blocks_per_sm=24),
    90: _Nvidia(max_warps_per_sm=64, max_blocks_per_sm=32),
    100: _Nvidia(max_warps_per_sm=64, max_blocks_per_sm=32),
    103: _Nvidia(max_warps_per_sm=64, max_blocks_per_sm=32),
    120: _Nvidia(max_warps_per_sm=48, max_blocks_per_sm=32),
}


class _Amd(NamedTuple):
    max_waves_per_eu: int
    eus_per_cu: int = 4  # SIMDs a workgroup's waves share: a CDNA CU, an RDNA WGP (Triton compiles in WGP mode)


# AMD, from LLVM's AMDGPU backend (AMDGPUBaseInfo.cpp: getMaxWavesPerEU, getEUsPerCU) and the CDNA/RDNA ISA
# guides: waves per SIMD (EU) at most 10 on gfx908, 8 on gfx90a and later CDNA, 20 on gfx10.1, 16 on gfx10.3+.
_AMD: tuple[tuple[str, _Amd], ...] = (
    (r"gfx90a|gfx94\w|gfx95\w", _Amd(max_waves_per_eu=8)),
    (r"gfx9\w+", _Amd(max_waves_per_eu=10)),
    (r"gfx101\w", _Amd(max_waves_per_eu=20)),
    (r"gfx1[0-2]\w+", _Amd(max_waves_per_eu=16)),
)


def lower(occupancy: int | None, num_warps: int, target: GpuTarget | None) -> dict[str, int | None]:
    """The compile options `occupancy` becomes for a block of `num_warps` warps on `target`: `{"maxnreg": 128}`
    on NVIDIA, `{"waves_per_eu": 4}` on AMD, the knob None where any kernel reaches it unconstrained (a cap would
    only change the code: `.maxnreg 255` makes ptxas use more registers, not fewer); `{}` for no hint (None) or the
    interpreter (`target` None). Raises OccupancyUnreachable when the target cannot hold that many such blocks."""
    if occupancy is None or target is None:
        return {}
    if target.backend == "cuda":
        return {"maxnreg": _register_cap(occupancy, num_warps, int(target.arch))}
    if target.backend == "hip":
        return {"waves_per_eu": _waves_per_eu(occupancy, num_warps, str(target.arch))}
    raise AutotuneError(
        f"occupancy={occupancy}: no lowering for the {target.backend!r} backend (cuda and hip have one)"
    )


def _register_cap(occupancy: int, num_warps: int, arch: int) -> int | None:
    """maxnreg = registers per SM / (occupancy x threads per block), rounded down to the allocation unit; None at
    or over the per-thread maximum."""
    known = [a for a in _NVIDIA if a <= arch]
    if not known:
        raise AutotuneError(f"occupancy: no figures for sm_{arch} (known: sm_70 and later); drop occupancy")
    fig = _NVIDIA[max(known)]
    threads = num_warps * 32
    where = f"occupancy={occupancy} at num_warps={num_warps} on sm_{arch}"
    if occupancy * num_warps > fig.max_warps_per_sm or occupancy > fig.max_blocks_per_sm:
        raise OccupancyUnreachable(
            f"out of resources: {where}: {occupancy} blocks x {num_warps} warps = {occupancy * num_warps} "
            f"warps, sm_{arch} holds at most {fig.max_warps_per_sm} warps and {fig.max_blocks_per_sm} blocks "
            "per SM; lower occupancy or num_warps"
        )
    share = fig.regs_per_sm // (occupancy * threads)
    cap = share // fig.reg_unit_per_thread * fig.reg_unit_per_thread
    if cap < fig.min_regs_per_thread:
        raise OccupancyUnreachable(
            f"out of resources: {where}: {fig.regs_per_sm} registers per SM / ({occupancy} x {threads} threads)"
            f" = {share} per thread, rounded down to {cap}, under the {fig.min_regs_per_thread} ptxas allows; "
            "lower occupancy or num_warps"
        )
    return cap if cap < fig.max_regs_per_thread else None


def _waves_per_eu(occupancy: int, num_warps: int, arch: str) -> int | None:
    """waves_per_eu = occupancy x waves per block / SIMDs per CU, rounded up, at most the EU's maximum; None for
    one (every kernel fits one wave per SIMD)."""
    fig = next((f for pattern, f in _AMD if re.fullmatch(pattern, arch)), None)
    if fig is None:
        raise AutotuneError(f"occupancy: no figures for {arch} (known: gfx9xx, gfx10xx to gfx12xx); drop occupancy")
    waves = -(-occupancy * num_warps // fig.eus_per_cu)
    if waves > fig.max_waves_per_eu:
        raise OccupancyUnreachable(
            f"out of resources: occupancy={occupancy} at num_warps={num_warps} on {arch}: {occupancy} x "
            f"{num_warps} waves / {fig.eus_per_cu} SIMDs = {waves} waves per SIMD, {arch} runs at most "
            f"{fig.max_waves_per_eu}; lower occupancy or num_warps"
        )
    return waves if waves > 1 else None


def lowering(options: Mapping[str, Any], target: GpuTarget | None) -> dict[str, int | None]:
    """What the `occupancy` among a config's compile options (static ones included) lowers to on `target`, at
    their num_warps (Triton's default without one)."""
    return lower(options.get(FIELD), options.get("num_warps") or DEFAULT_NUM_WARPS, target)


def lowered_options(options: Mapping[str, Any], target: GpuTarget | None) -> dict[str, Any]:
    """A config's compile options (static ones included) with `occupancy` replaced by what it lowers to on
    `target` (None: the interpreter, where it has no effect)."""
    return {**{k: v for k, v in options.items() if k != FIELD}, **lowering(options, target)}


def describe(lowered: Mapping[str, int | None] | UnsetType | None) -> str:
    """` [occupancy -> maxnreg=128]`: what a config's occupancy became, for the reports; "" without one."""
    if lowered is None or lowered is UNSET:
        return ""
    if not lowered:
        return " [occupancy: no effect in the interpreter]"
    return (
        " [occupancy -> "
        + ", ".join(f"{k}={v}" if v is not None else f"no {k} needed" for k, v in lowered.items())
        + "]"
    )
