"""Compilation targets (`cuda:90`, `hip:gfx942`) and the per-block resource limits of each architecture.

Why: an explicit-target compile needs no GPU, so Triton never checks that the kernel fits the GPU; the
limits here let precompile report a config that cannot launch (`over_limits`) before any GPU sees it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import PrecompileError

__all__ = ["Target", "parse_target", "active_target", "ResourceLimits", "limits_for", "over_limits"]

_HIP_WAVE32 = re.compile(r"^gfx1\d{3}")  # RDNA (gfx10xx/11xx/12xx) runs wave32; CDNA (gfx9xx) wave64
# An AMDGPU processor: gfx, major (6-9, or 1x), minor (decimal), stepping (hex): gfx908, gfx90a, gfx1100.
_GFX = re.compile(r"gfx(?:[6-9]|1\d)\d[0-9a-f]")
# Compute capabilities a target may name: ptxas knows sm_50 to sm_121 (2025); the headroom is for later GPUs,
# the bounds only refuse what cannot be one (sm_9, sm_999).
_CUDA_MIN, _CUDA_MAX = 50, 300


@dataclass(frozen=True)
class Target:
    """A compilation target: `cuda:90` (compute capability 9.0), `hip:gfx942`. `str()` gives that spelling."""

    backend: str
    arch: int | str
    warp_size: int

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"

    def gpu_target(self) -> Any:
        """The `triton.backends.compiler.GPUTarget` that `triton.compile` takes."""
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)

    @classmethod
    def from_gpu_target(cls, target: Any) -> Target:
        return cls(str(target.backend), target.arch, int(target.warp_size))


def parse_target(spec: str | Target | Any) -> Target:
    """`"cuda:90"`, `"cuda:sm_90a"`, `"sm_80"`, `"hip:gfx942"`, `"gfx942"`, a `Target` or a Triton `GPUTarget`."""
    if isinstance(spec, Target):
        return spec
    if hasattr(spec, "backend") and hasattr(spec, "arch") and hasattr(spec, "warp_size"):
        return Target.from_gpu_target(spec)
    if not isinstance(spec, str):
        raise PrecompileError(f"target {spec!r}: give a string such as 'cuda:90' or 'hip:gfx942'")
    text = spec.strip().lower()
    backend, _, arch = text.partition(":") if ":" in text else ("", "", text)
    if not backend:
        backend = "hip" if arch.startswith("gfx") else "cuda"
    if backend in ("cuda", "nvidia"):
        return _cuda_target(spec, arch)
    if backend in ("hip", "rocm", "amd"):
        return _hip_target(spec, arch)
    raise PrecompileError(f"target {spec!r}: unknown backend {backend!r}; use 'cuda:<cc>' or 'hip:<gfx arch>'")


def _cuda_target(spec: str, arch: str) -> Target:
    """`arch` ("90", "sm_90a", "sm80") as a CUDA target: a compute capability (major digits, then one minor
    digit) from `_CUDA_MIN` to `_CUDA_MAX`, no leading zero, as `ptxas --gpu-name=sm_<cc>` knows them."""
    match = re.fullmatch(r"(?:sm_?)?([1-9]\d{1,2})a?", arch)
    if not match or not _CUDA_MIN <= int(match.group(1)) <= _CUDA_MAX:
        raise PrecompileError(
            f"target {spec!r}: a CUDA target is 'cuda:<compute capability>', major and minor digits with no "
            f"leading zero, {_CUDA_MIN} to {_CUDA_MAX} ('sm_' before it and 'a' after it are allowed), such as "
            f"'cuda:80' (A100), 'cuda:90' (H100), 'cuda:100' (B200)"
        )
    return Target("cuda", int(match.group(1)), 32)


def _hip_target(spec: str, arch: str) -> Target:
    """`arch` ("gfx942", "gfx90a", "gfx1100") as a HIP target: LLVM's AMDGPU processor name, `gfx`, the major
    version in decimal (6 to 19), the minor in decimal and the stepping in hex; Triton's
    AMD backend reads the major as the digits before the last two (wave32 from 10 on)."""
    if not _GFX.fullmatch(arch):
        raise PrecompileError(
            f"target {spec!r}: a HIP target is 'hip:<gfx arch>', LLVM's AMDGPU processor name: 'gfx', the "
            f"major version (6 to 19), one minor digit and one hex stepping digit, such as "
            f"'hip:gfx942' (MI300), 'hip:gfx90a' (MI200), 'hip:gfx1100' (RX 7900)"
        )
    return Target("hip", arch, 32 if _HIP_WAVE32.match(arch) else 64)


def active_target() -> Target:
    """The target of this process's active GPU (Triton's driver); without one, a PrecompileError that says to
    name the targets."""
    from triton.runtime.driver import driver

    from ..engine.compilers import driver_problem

    problem = driver_problem()
    if problem is not None:
        raise PrecompileError(
            f"no GPU here to precompile for ({problem}): name the targets instead, e.g. "
            "precompile(..., targets=['cuda:90']) or `autotune precompile ... --target cuda:90` "
            "(several: --target cuda:90 --target cuda:80); no GPU is needed for that"
        )
    return Target.from_gpu_target(driver.active.get_current_target())


@dataclass(frozen=True)
class ResourceLimits:
    """Per-block limits of a GPU architecture that a compiled kernel must fit to be launched at all."""

    name: str  # "sm_80", "gfx942"
    shared_bytes: int  # shared memory (LDS) per block, with the opt-in carve-out
    regs_per_block: int | None = 65536
    regs_per_thread: int | None = 255
    max_threads_per_block: int = 1024
    reg_alloc_unit: int = 256  # registers are allocated per warp in units of this many


_KIB = 1024
# CUDA C Programming Guide, "Technical Specifications per Compute Capability": maximum shared memory per
# block (opt-in), 64K 32-bit registers per SM and per block, 255 per thread, 1024 threads per block.
_CUDA_SHARED: dict[int, int] = {
    70: 96 * _KIB,
    72: 96 * _KIB,
    75: 64 * _KIB,
    80: 163 * _KIB,
    86: 99 * _KIB,
    87: 163 * _KIB,
    89: 99 * _KIB,
    90: 227 * _KIB,
    100: 227 * _KIB,
    103: 227 * _KIB,
    120: 99 * _KIB,
    121: 99 * _KIB,
}
# LDS per workgroup (AMD ISA guides / ROCm docs): 64 KiB on CDNA2/3 and RDNA, 160 KiB on gfx950 (MI350).
_HIP_SHARED: dict[str, int] = {
    "gfx908": 64 * _KIB,
    "gfx90a": 64 * _KIB,
    "gfx940": 64 * _KIB,
    "gfx941": 64 * _KIB,
    "gfx942": 64 * _KIB,
    "gfx950": 160 * _KIB,
    "gfx1030": 64 * _KIB,
    "gfx1100": 64 * _KIB,
    "gfx1101": 64 * _KIB,
    "gfx1200": 64 * _KIB,
    "gfx1201": 64 * _KIB,
}


def limits_for(target: str | Target) -> ResourceLimits | None:
    """The limits of `target` (an unknown CUDA arch takes those of the closest older one), or None if unknown.

    Register limits are checked for CUDA only: on AMD a kernel over its VGPR budget spills, it does not fail.
    """
    target = parse_target(target)
    if target.backend == "cuda":
        known = sorted(a for a in _CUDA_SHARED if a <= int(target.arch))
        if not known:
            return None
        return ResourceLimits(name=f"sm_{target.arch}", shared_bytes=_CUDA_SHARED[known[-1]])
    if target.backend == "hip":
        shared = _HIP_SHARED.get(str(target.arch))
        if shared is None:
            return None
        return ResourceLimits(name=str(target.arch), shared_bytes=shared, regs_per_block=None, regs_per_thread=None)
    return None


def over_limits(
    target: Target, *, shared: int | None, n_regs: int | None, num_warps: int | None, warp_size: int
) -> str | None:
    """Why a compiled kernel cannot launch on `target`, or None when it fits (or the limits are unknown)."""
    limits = limits_for(target)
    if limits is None:
        return None
    if shared is not None and shared > limits.shared_bytes:
        return (
            f"out of resources: needs {shared} bytes of shared memory per block, {limits.name} has "
            f"{limits.shared_bytes} ({limits.shared_bytes // _KIB} KiB); use smaller blocks or fewer num_stages"
        )
    threads = (num_warps or 0) * warp_size
    if threads > limits.max_threads_per_block:
        return (
            f"out of resources: {num_warps} warps x {warp_size} = {threads} threads per block, "
            f"{limits.name} allows {limits.max_threads_per_block}; use fewer num_warps"
        )
    if n_regs is not None and limits.regs_per_thread is not None and n_regs > limits.regs_per_thread:
        return f"out of resources: {n_regs} registers per thread, {limits.name} allows {limits.regs_per_thread}"
    if n_regs is not None and limits.regs_per_block is not None and num_warps:
        unit = limits.reg_alloc_unit
        per_warp = -(-n_regs * warp_size // unit) * unit
        if per_warp * num_warps > limits.regs_per_block:
            return (
                f"out of resources: {n_regs} registers per thread x {threads} threads = {per_warp * num_warps} "
                f"registers per block (allocated per warp in units of {unit}), {limits.name} has "
                f"{limits.regs_per_block}; use fewer num_warps or set maxnreg"
            )
    return None
