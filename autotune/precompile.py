"""Ahead-of-time compilation of a kernel's configs, and moving tuned kernels between machines.

What
----
`precompile(kernel, *example_args | signature=..., targets=["cuda:90", "cuda:80"])` compiles every config
of an `@autotune` kernel's space (or only its cached winners) for each target into Triton's own compile
cache (`triton.knobs.cache.dir`, i.e. TRITON_CACHE_DIR, else ~/.triton/cache), in the compile thread pool
of `autotune.pipeline`, and returns a `PrecompileReport` (compiled with cache hits counted, failed with
their errors, wall time, configs/s). An explicit target needs no GPU. `targets=None` compiles for the
active GPU through the kernel's own JIT (`triton.AsyncCompileMode`), so the JIT's in-memory kernel cache
is filled and later launches compile nothing at all.

`export_archive(path)` / `import_archive(path)` (CLI: `autotune export` / `autotune import`) move the
tuned winners (the disk cache's JSON records) and the compiled binaries (the kernels' entries of
Triton's cache directory) between machines as one .tar.gz with a manifest.

Why
---
A deployed service should start tuned and compiled: the winners come from the tuning cache; the
binaries from a build machine that may have no GPU. Compiling a whole space ahead of time also tells
which configs cannot compile or cannot run on a target (out of shared memory, too many registers)
before any GPU sees them.

How an explicit-target compile is made
--------------------------------------
The specialization is computed by the JIT's own code: the kernel's binder
(`triton.runtime.jit.create_function_from_signature`, built for the target's backend) applied to the
example arguments and the config's launch keywords, then `JITFunction._pack_args`, with the option
defaults `JITFunction.run` adds (debug, instrumentation mode). That yields exactly the
`ASTSource(fn, signature, constexprs, attrs)` and options that a launch with those arguments builds on
a GPU of that target, and `triton.compile(src, target=GPUTarget(...), options=...)` stores the result
under the same key. A `signature=` dict instead of example arguments is turned into stand-in
arguments that specialize as described by its entries (see `parse_signature`).

Under TRITON_INTERPRET=1 (the tests, the CPU examples) this process's Triton is the interpreter: the
kernel and triton.language's own @jit helpers (`tl.cdiv`, `tl.sum`, ...) are `InterpretedFunction`s
that cannot generate code. The compiles then run in helper processes started without the interpreter
(one per pool thread, reused across calls, closed at exit); each thread of the pool drives one. They
import the kernel's module by name (a script's `__main__` by file path, without running its
`if __name__ == "__main__":` block), so such a kernel must be defined at module level.
`processes=True` uses helper processes for a JIT kernel too (it escapes the GIL that part of Triton's
compile holds; see bench/bench_precompile.py).

Resource checks
---------------
Triton reports too much shared memory or too many threads only when a kernel is loaded on a GPU.
After each compile, the kernel's shared memory (`metadata.shared`), its registers per thread (read
from the cubin's EIATTR_REGCOUNT, or `CompiledKernel.n_regs` after a load on a GPU) and its threads
per block are compared with the target's limits (`limits_for`); a config over them is reported as
failed (`kind="out_of_resources"`). Register spills (`n_spills` on a GPU, the stack frame size from the
cubin otherwise) are reported, not failed.

Reuse of explicit-target compiles on a GPU (what Triton's code says; 3.6 and 3.9 agree)
-----------------------------------------------------------------------------------------
`triton.compile` (triton/compiler/compiler.py) stores a kernel in
`<cache dir>/<base32(sha256(key))>/` with::

    key = f"{triton_key()}-{src.hash()}-{backend.hash()}-{options.hash()}-{sorted(env_vars.items())}"

- `triton_key()`: a hash of the installed Triton itself (version, compiler and backend sources,
  libtriton): the same Triton build is needed on both machines.
- `src.hash()`: sha256 of the kernel's `cache_key` (its source, its starting line number, the cache
  keys of the @jit functions it calls, the constexpr globals it reads), the attrs, the signature types
  and the constexpr values. Attrs and types come from the specialization of the launch's arguments:
  16-byte aligned pointers and integers divisible by 16 get `tt.divisibility=16`; an integer equal to
  1 becomes the constexpr 1; integers past 2**31 are i64 (unless `do_not_specialize`).
- `backend.hash()`: CUDA: `f"{ptxas --version}-{arch}"`. An H100's `driver.get_current_target()` is
  `GPUTarget("cuda", 90, 32)`, which is what "cuda:90" makes, and ptxas is the one bundled with the
  same Triton wheel (unless TRITON_PTXAS_PATH / TRITON_PTXAS_BLACKWELL_PATH point elsewhere). HIP: the
  target and the AMD codegen revision.
- `options.hash()`: every field of CUDAOptions/HIPOptions: arch (`sm90`, or TRITON_OVERRIDE_ARCH),
  num_warps, num_stages, num_ctas, maxnreg, debug (TRITON_DEBUG, `@jit(debug=)`), enable_fp_fusion
  (TRITON_DEFAULT_FP_FUSION), ptx_options (TRITON_PTXAS_OPTIONS), the libdevice file's hash, ...
- `env_vars`: the values of Triton's cache-invalidating environment variables.

On a GPU, a launch that misses the JIT's in-memory kernel cache (the first launch of each config in a
process) calls `_do_compile` -> `triton.compile(ASTSource(self, signature, constexprs, attrs),
target=<the GPU's target>, options)`; `compile` returns the stored kernel without compiling when
`<name>.json` and its group file are in that directory. Since precompile builds the same ASTSource and
options with the JIT's own binder, the keys are equal and the launch loads the precompiled cubin:
nothing is compiled on the GPU machine. This was checked on a CPU: in a process without the
interpreter and with a stub driver that reports cuda:90, `JITFunction.run(..., warmup=True)` -- the JIT
launch path up to the launch itself -- finds every config precompiled here for "cuda:90" (Triton's
compilation listener reports `cache_hit=True` with the same hash): tests/test_precompile.py::
test_jit_launch_path_finds_explicit_target_precompile. The `gpu`-marked tests check the real thing.

It does not carry over when any part of the key differs: another Triton build or ptxas, another
value of a Triton environment variable above, an edit of the kernel or of a @jit function it calls
(even moving its `def` to another line), or a launch whose arguments specialize differently from the
example arguments (an unaligned view, a stride that is 1 on one side only, a size that is a multiple
of 16 on one side only: pass example arguments shaped like production's, or precompile each variant).
The JIT's in-memory cache is per process: after an explicit-target precompile, the first launch of a
config in a new process still reads its binary from disk (milliseconds, no compile).
"""
from __future__ import annotations

import atexit
import dataclasses
import hashlib
import importlib
import importlib.util
import io
import json
import logging
import os
import pickle
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field

from .kernel_ref import base_kernel, heuristics_layers, is_interpreted
from .errors import ArchiveError, PrecompileError
from .space import Config, as_space

__all__ = [
    "precompile", "PrecompileReport", "CompiledConfig", "FailedConfig", "PrecompileError",
    "Target", "parse_target", "ResourceLimits", "limits_for", "parse_signature", "cubin_resource_usage",
    "export_archive", "import_archive", "ArchiveManifest", "ImportReport", "ArchiveError", "register_cli",
    "load_kernel",
]

logger = logging.getLogger("autotune")

_SUPPORTED_TRITON = "3.6 to 3.9"




# ================================================================================================ targets


_HIP_WAVE32 = re.compile(r"^gfx1\d{3}")  # RDNA (gfx10xx/11xx/12xx) runs wave32; CDNA (gfx9xx) wave64


@dataclass(frozen=True)
class Target:
    """A compilation target: `cuda:90` (compute capability 9.0), `hip:gfx942`. `str()` gives that spelling."""

    backend: str
    arch: Union[int, str]
    warp_size: int

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"

    def gpu_target(self) -> Any:
        """The `triton.backends.compiler.GPUTarget` that `triton.compile` takes."""
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)

    @classmethod
    def from_gpu_target(cls, target: Any) -> "Target":
        return cls(str(target.backend), target.arch, int(target.warp_size))


def parse_target(spec: Union[str, Target, Any]) -> Target:
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
        match = re.fullmatch(r"(?:sm_?)?(\d{2,3})a?", arch)
        if not match:
            raise PrecompileError(f"target {spec!r}: a CUDA target is 'cuda:<compute capability>' such as "
                                  f"'cuda:80' (A100), 'cuda:90' (H100), 'cuda:100' (B200)")
        return Target("cuda", int(match.group(1)), 32)
    if backend in ("hip", "rocm", "amd"):
        if not re.fullmatch(r"gfx[0-9a-f]{3,4}", arch):
            raise PrecompileError(f"target {spec!r}: a HIP target is 'hip:<gfx arch>' such as 'hip:gfx942' (MI300)")
        return Target("hip", arch, 32 if _HIP_WAVE32.match(arch) else 64)
    raise PrecompileError(f"target {spec!r}: unknown backend {backend!r}; use 'cuda:<cc>' or 'hip:<gfx arch>'")


def _active_target() -> Target:
    from triton.runtime.driver import driver

    return Target.from_gpu_target(driver.active.get_current_target())


# ================================================================================================ resource limits


@dataclass(frozen=True)
class ResourceLimits:
    """Per-block limits of a GPU architecture that a compiled kernel must fit to be launched at all."""

    name: str                       # "sm_80", "gfx942"
    shared_bytes: int               # shared memory (LDS) per block, with the opt-in carve-out
    regs_per_block: Optional[int] = 65536
    regs_per_thread: Optional[int] = 255
    max_threads_per_block: int = 1024
    reg_alloc_unit: int = 256       # registers are allocated per warp in units of this many


_KIB = 1024
# CUDA C Programming Guide, "Technical Specifications per Compute Capability": maximum shared memory per
# block (opt-in), 64K 32-bit registers per SM and per block, 255 per thread, 1024 threads per block.
_CUDA_SHARED: dict[int, int] = {
    70: 96 * _KIB, 72: 96 * _KIB, 75: 64 * _KIB, 80: 163 * _KIB, 86: 99 * _KIB, 87: 163 * _KIB, 89: 99 * _KIB,
    90: 227 * _KIB, 100: 227 * _KIB, 103: 227 * _KIB, 120: 99 * _KIB, 121: 99 * _KIB,
}
# LDS per workgroup (AMD ISA guides / ROCm docs): 64 KiB on CDNA2/3 and RDNA, 160 KiB on gfx950 (MI350).
_HIP_SHARED: dict[str, int] = {
    "gfx908": 64 * _KIB, "gfx90a": 64 * _KIB, "gfx940": 64 * _KIB, "gfx941": 64 * _KIB, "gfx942": 64 * _KIB,
    "gfx950": 160 * _KIB, "gfx1030": 64 * _KIB, "gfx1100": 64 * _KIB, "gfx1101": 64 * _KIB, "gfx1200": 64 * _KIB,
    "gfx1201": 64 * _KIB,
}


def limits_for(target: Union[str, Target]) -> Optional[ResourceLimits]:
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


def cubin_resource_usage(cubin: bytes) -> dict[str, Optional[int]]:
    """`{"n_regs", "frame_bytes"}` of the kernel in a CUDA cubin (an ELF), read without a GPU.

    From the `.nv.info` sections: EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11), each an
    (symbol index, value) pair; the largest over the functions in the cubin (a Triton cubin holds one
    kernel plus any noinline device functions). A stack frame larger than 0 in a Triton kernel means
    register spills. Values are None when the cubin does not carry them.
    """
    out: dict[str, Optional[int]] = {"n_regs": None, "frame_bytes": None}
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        return out  # not a little-endian ELF64
    try:
        e_shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        sections = []
        for i in range(e_shnum):
            name, _typ, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin, e_shoff + i * e_shentsize)
            sections.append((name, offset, size))
        strtab = sections[e_shstrndx][1]
        wanted = {0x2F: "n_regs", 0x11: "frame_bytes"}
        for name_off, offset, size in sections:
            end_name = cubin.index(b"\0", strtab + name_off)
            if not cubin[strtab + name_off:end_name].startswith(b".nv.info"):
                continue
            pos, end = offset, offset + size
            while pos + 4 <= end:
                fmt, attr = cubin[pos], cubin[pos + 1]
                if fmt == 4:  # EIFMT_SVAL: u16 size, then that many bytes
                    length = struct.unpack_from("<H", cubin, pos + 2)[0]
                    if attr in wanted and length == 8:
                        value = struct.unpack_from("<I", cubin, pos + 8)[0]
                        key = wanted[attr]
                        out[key] = max(out[key] or 0, value)
                    pos += 4 + length
                else:  # EIFMT_NVAL / BVAL / HVAL: 4 bytes in all
                    pos += 4
    except (struct.error, ValueError, IndexError):
        return {"n_regs": None, "frame_bytes": None}
    return out


def _over_limits(target: Target, *, shared: Optional[int], n_regs: Optional[int], num_warps: Optional[int],
                 warp_size: int) -> Optional[str]:
    """Why a compiled kernel cannot launch on `target`, or None when it fits (or the limits are unknown)."""
    limits = limits_for(target)
    if limits is None:
        return None
    if shared is not None and shared > limits.shared_bytes:
        return (f"out of resources: needs {shared} bytes of shared memory per block, {limits.name} has "
                f"{limits.shared_bytes} ({limits.shared_bytes // _KIB} KiB); use smaller blocks or fewer num_stages")
    threads = (num_warps or 0) * warp_size
    if threads > limits.max_threads_per_block:
        return (f"out of resources: {num_warps} warps x {warp_size} = {threads} threads per block, "
                f"{limits.name} allows {limits.max_threads_per_block}; use fewer num_warps")
    if n_regs is not None and limits.regs_per_thread is not None and n_regs > limits.regs_per_thread:
        return f"out of resources: {n_regs} registers per thread, {limits.name} allows {limits.regs_per_thread}"
    if n_regs is not None and limits.regs_per_block is not None and num_warps:
        unit = limits.reg_alloc_unit
        per_warp = -(-n_regs * warp_size // unit) * unit
        if per_warp * num_warps > limits.regs_per_block:
            return (f"out of resources: {n_regs} registers per thread x {threads} threads = {per_warp * num_warps} "
                    f"registers per block (allocated per warp in units of {unit}), {limits.name} has "
                    f"{limits.regs_per_block}; use fewer num_warps or set maxnreg")
    return None


# ================================================================================================ signatures


# Triton type name -> torch dtype name, for stand-in pointer arguments.
_TORCH_DTYPES = {
    "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64", "i8": "int8", "i16": "int16",
    "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "u1": "bool", "i1": "bool", "fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2",
    "fp8e4b8": "float8_e4m3fnuz", "fp8e5b16": "float8_e5m2fnuz",
}
# Scalar type -> a Python value that Triton's JIT specializes to exactly that type (and no divisibility);
# ":16" variants -> one divisible by 16.
_SCALAR_STANDINS: dict[str, Any] = {
    "i32": 3, "i32:16": 16, "i64": 2**31 + 3, "i64:16": 2**32, "u64": 2**63 + 3, "u64:16": 2**63 + 16,
    "fp32": 1.5, "u1": True, "i1": True,
}


class _StandInPointer:
    """Stands for a tensor in a `signature=` precompile: the JIT specializes it by `dtype` and `data_ptr()`."""

    def __init__(self, dtype: Any, type_name: str, aligned: bool = True) -> None:
        self.dtype = dtype
        self.type_name = type_name
        self._ptr = 256 if aligned else 8

    def data_ptr(self) -> int:
        return self._ptr

    def ptr_range(self) -> int:
        """Bytes addressed: small, as for a tensor under 2 GiB (the AMD backend's buffer-ops specialization)."""
        return 1 << 20

    def __repr__(self) -> str:
        return f"<stand-in *{self.type_name}>"


def _pointer_standin(type_name: str, aligned: bool) -> _StandInPointer:
    torch_name = _TORCH_DTYPES.get(type_name)
    dtype: Any = None
    if torch_name is not None:
        import torch

        dtype = getattr(torch, torch_name, None)
    if dtype is None:
        import triton.language as tl

        try:
            dtype = tl.dtype(type_name)
        except Exception:
            raise PrecompileError(f"signature type '*{type_name}': unknown element type; use one of "
                                  f"{sorted(_TORCH_DTYPES)}") from None
    return _StandInPointer(dtype, type_name, aligned)


def _wrap_dtype(arg: Any) -> Any:
    """An example argument given as a torch dtype stands for an aligned tensor of that dtype (as in Triton's
    `kernel.warmup(torch.float16, ...)`)."""
    if type(arg).__name__ == "dtype" and type(arg).__module__ == "torch":
        return _StandInPointer(arg, str(arg).replace("torch.", ""))
    return arg


def parse_signature(signature: Union[Mapping[str, Any], str]) -> dict[str, Any]:
    """Turn a `signature=` into stand-in argument values by name, which Triton's JIT specializes as described.

    A dict `{name: entry}` or a string `"name=entry, name=entry"` (entries as below; a JSON object works too):

    - `"*fp16"`, `"*bf16"`, `"*fp32"`, `"*i32"`, `"*fp8e4nv"`, ...: a pointer, 16-byte aligned as torch
      allocations are (`tt.divisibility=16`), into a buffer under 2 GiB (AMD's buffer-ops specialization);
      `"*fp16:1"` for one that may not be aligned (a view at an odd offset);
    - `"i32"`, `"i64"`, `"u64"`: an integer not divisible by 16; `"i32:16"` (`"i64:16"`): divisible by 16,
      as the JIT specializes sizes and strides that are multiples of 16;
    - `"fp32"`, `"u1"`: a float, a bool;
    - a literal value (`1`, `0.5`, `None`, `true`): passed as is: the JIT makes the integer 1 and None
      compile-time constants, and constexpr parameters that are not tuned take their value this way.

    Constexpr meta-parameters tuned by the space come from each config and must not be given here.
    """
    if isinstance(signature, str):
        text = signature.strip()
        if text.startswith("{"):
            try:
                signature = json.loads(text)
            except ValueError as exc:
                raise PrecompileError(f"signature {text!r}: not valid JSON ({exc})") from None
        else:
            pairs: dict[str, Any] = {}
            for part in filter(None, (p.strip() for p in text.split(","))):
                name, eq, value = part.partition("=")
                if not eq or not name.strip():
                    raise PrecompileError(f"signature entry {part!r}: write name=type, e.g. 'x=*fp32, n=i32'")
                value = value.strip()
                try:
                    pairs[name.strip()] = json.loads(value)
                except ValueError:
                    pairs[name.strip()] = value
            signature = pairs
    if not isinstance(signature, Mapping):
        raise PrecompileError(f"signature={signature!r}: give a dict {{arg name: type}} or 'name=type, ...'")
    out: dict[str, Any] = {}
    for name, entry in signature.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise PrecompileError(f"signature key {name!r}: keys are the kernel's argument names")
        out[name] = _standin(name, entry)
    return out


def _standin(name: str, entry: Any) -> Any:
    if not isinstance(entry, str):
        return entry  # a literal value: the JIT specializes it itself
    text = entry.strip()
    if text.startswith("*"):
        base, _, hint = text[1:].partition(":")
        if hint not in ("", "16", "1"):
            raise PrecompileError(f"signature {name}={entry!r}: a pointer takes ':16' (aligned, the default) or ':1'")
        return _pointer_standin(base.strip(), aligned=hint != "1")
    key = text.replace(" ", "")
    if key in _SCALAR_STANDINS:
        return _SCALAR_STANDINS[key]
    if key in ("constexpr", "tl.constexpr"):
        raise PrecompileError(f"signature {name}={entry!r}: give the constexpr's value (e.g. {name}=64), "
                              "or leave it out when the space tunes it")
    raise PrecompileError(f"signature {name}={entry!r}: unknown type; use a pointer ('*fp16', '*fp32', ...), "
                          f"one of {sorted(_SCALAR_STANDINS)}, or a literal value")


# ================================================================================================ report


@dataclass(frozen=True)
class CompiledConfig:
    """One config compiled for one target (or found already compiled in Triton's cache: `cached`)."""

    config: Config
    target: str
    cached: Optional[bool]          # True: Triton's cache already had it; None: could not be told
    compile_s: float
    hash: Optional[str] = None      # Triton's cache key (sha256 hex)
    shared_bytes: Optional[int] = None
    num_warps: Optional[int] = None
    n_regs: Optional[int] = None
    n_spills: Optional[int] = None  # from the loaded kernel, on a GPU only
    frame_bytes: Optional[int] = None  # stack frame from the cubin: > 0 means register spills
    path: Optional[str] = None      # the directory of Triton's cache holding it

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["config"] = dict(self.config)
        return out


@dataclass(frozen=True)
class FailedConfig:
    """One config that did not compile for one target, or compiled to a kernel the target cannot launch."""

    config: Config
    target: str
    error: str
    kind: str = "compile_error"     # "compile_error" | "out_of_resources" | "timeout"

    def to_dict(self) -> dict[str, Any]:
        return {"config": dict(self.config), "target": self.target, "error": self.error, "kind": self.kind}


@dataclass
class PrecompileReport:
    """What `precompile` did: per (config, target), compiled or failed; the wall time and the throughput."""

    kernel: str
    targets: list[str]
    compiled: list[CompiledConfig] = field(default_factory=list)
    failed: list[FailedConfig] = field(default_factory=list)
    wall_s: float = 0.0
    workers: int = 0
    processes: bool = False
    triton_cache_dir: Optional[str] = None
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.compiled) + len(self.failed)

    @property
    def cache_hits(self) -> int:
        """Configs that Triton's cache already held (nothing compiled)."""
        return sum(1 for c in self.compiled if c.cached)

    @property
    def fresh(self) -> int:
        """Configs compiled now."""
        return sum(1 for c in self.compiled if not c.cached)

    @property
    def configs_per_s(self) -> float:
        return self.total / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def ok(self) -> bool:
        return not self.failed

    def for_target(self, target: Union[str, Target]) -> tuple[list[CompiledConfig], list[FailedConfig]]:
        name = str(parse_target(target))
        return ([c for c in self.compiled if c.target == name], [f for f in self.failed if f.target == name])

    def summary(self) -> str:
        return (f"precompile {self.kernel} for {', '.join(self.targets)}: {len(self.compiled)} compiled "
                f"({self.fresh} now, {self.cache_hits} already in Triton's cache), {len(self.failed)} failed, "
                f"{self.wall_s:.2f} s, {self.configs_per_s:.1f} configs/s, "
                f"{self.workers} {'helper processes' if self.processes else 'workers'}")

    def __str__(self) -> str:
        from .cli import format_config, format_table

        rows = []
        for c in sorted(self.compiled, key=lambda c: (c.target, c.compile_s)):
            regs = "-" if c.n_regs is None else str(c.n_regs)
            rows.append([c.target, format_config(c.config), "cached" if c.cached else "compiled",
                         f"{c.compile_s:.2f}", "-" if c.shared_bytes is None else c.shared_bytes, regs, ""])
        for f in self.failed:
            first = (f.error.strip().splitlines() or [""])[-1] if f.kind == "compile_error" else f.error
            rows.append([f.target, format_config(f.config), f.kind, "-", "-", "-",
                         first if len(first) <= 90 else first[:87] + "..."])
        table = format_table(["TARGET", "CONFIG", "STATUS", "SECONDS", "SHARED_B", "REGS", "ERROR"], rows,
                             right={3, 4, 5})
        return "\n".join([table, "", self.summary(), *self.notes])

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "targets": self.targets, "wall_s": self.wall_s, "workers": self.workers,
                "processes": self.processes, "configs_per_s": self.configs_per_s, "cache_hits": self.cache_hits,
                "fresh": self.fresh, "triton_cache_dir": self.triton_cache_dir, "notes": self.notes,
                "compiled": [c.to_dict() for c in self.compiled], "failed": [f.to_dict() for f in self.failed]}


# ================================================================================================ compile events


class _CompileListener:
    """Triton's compilation listener (`knobs.compilation.listener`), chained to any listener already set.

    It tells whether `triton.compile` found the kernel in its cache: events land in the calling thread's
    collector (`capture()`, for the explicit-target path, where our thread calls compile) and in every open
    `session()` by hash (for the JIT path, where Triton's AsyncCompileMode calls compile on our pool).
    """

    def __init__(self) -> None:
        self.previous: Optional[Callable[..., Any]] = None
        self.local = threading.local()
        self.sessions: list[dict[str, bool]] = []
        self.lock = threading.Lock()

    def __call__(self, *, src: Any, metadata: Any, metadata_group: Any, times: Any, cache_hit: bool,
                 **extra: Any) -> None:
        digest = metadata.get("hash") if isinstance(metadata, Mapping) else None
        events = getattr(self.local, "events", None)
        if events is not None:
            events.append((digest, bool(cache_hit)))
        with self.lock:
            for session in self.sessions:
                session[digest] = bool(cache_hit)
        if self.previous is not None:
            self.previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times,
                          cache_hit=cache_hit, **extra)

    def install(self) -> bool:
        """Make sure we are Triton's listener (keeping a user's as `previous`); False where Triton has none."""
        try:
            from triton import knobs
        except ImportError:  # pragma: no cover - Triton < 3.4
            return False
        compilation = knobs.compilation
        if not hasattr(compilation, "listener"):
            return False
        with self.lock:
            current = compilation.listener
            if current is not self:
                self.previous = current
                compilation.listener = self
        return True

    def capture(self) -> list:
        self.install()
        events: list = []
        self.local.events = events
        return events

    def release(self) -> None:
        self.local.events = None

    def session(self) -> dict[str, bool]:
        self.install()
        session: dict[str, bool] = {}
        with self.lock:
            self.sessions.append(session)
        return session

    def close(self, session: dict[str, bool]) -> None:
        with self.lock:
            self.sessions = [s for s in self.sessions if s is not session]


_LISTENER = _CompileListener()


# ================================================================================================ one compile


def _encode_constant(value: Any) -> Any:
    """Constexpr values cross to a helper process by pickle; @jit functions go by (module, qualname)."""
    from triton.runtime.jit import JITFunction

    fn = getattr(value, "fn", None)
    if isinstance(value, JITFunction) or type(value).__name__ == "InterpretedFunction":
        return ("__autotune_jit__", fn.__module__, fn.__qualname__)
    return value


def _decode_constant(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 3 and value[0] == "__autotune_jit__":
        return _resolve_jit(value[1], value[2], None)
    return value


def _compile_source(jit_fn: Any, target: Target, signature: dict, constexprs: dict, attrs: dict,
                    options: dict) -> dict[str, Any]:
    """`triton.compile` one specialization for `target`; returns what the report needs (plain data)."""
    import triton
    from triton.compiler import ASTSource

    src = ASTSource(jit_fn, signature, constexprs, attrs)
    events = _LISTENER.capture()
    started = time.perf_counter()
    try:
        compiled = triton.compile(src, target=target.gpu_target(), options=options)
    finally:
        _LISTENER.release()
    seconds = time.perf_counter() - started
    return _describe(compiled, target, seconds, events[-1][1] if events else None)


def _describe(compiled: Any, target: Target, seconds: float, cached: Optional[bool]) -> dict[str, Any]:
    metadata = compiled.metadata
    group = getattr(compiled, "metadata_group", None) or {}
    path = next((os.path.dirname(p) for name, p in group.items() if name.endswith(".json")), None)
    usage: dict[str, Optional[int]] = {"n_regs": None, "frame_bytes": None}
    if target.backend == "cuda":
        try:
            binary = compiled.asm.get("cubin")
        except Exception:  # noqa: BLE001 - a missing asm entry only loses the register count
            binary = None
        if isinstance(binary, (bytes, bytearray)):
            usage = cubin_resource_usage(bytes(binary))
    return {"hash": getattr(compiled, "hash", None), "cached": cached, "seconds": seconds,
            "shared": getattr(metadata, "shared", None), "num_warps": getattr(metadata, "num_warps", None),
            "warp_size": getattr(metadata, "warp_size", None) or target.warp_size, "path": path, **usage}


# ------------------------------------------------------------------------------------------------ kernels by name


def _kernel_location(jit_like: Any) -> dict[str, Any]:
    fn = jit_like.fn
    code = fn.__code__
    return {"module": fn.__module__, "qualname": fn.__qualname__, "file": code.co_filename,
            "line": code.co_firstlineno}


_RESOLVED: dict[tuple, Any] = {}
_RESOLVE_LOCK = threading.Lock()


def _resolve_jit(module_name: str, qualname: str, location: Optional[Mapping[str, Any]]) -> Any:
    """The JITFunction named module:qualname (in a helper process: imported without the interpreter)."""
    from triton.runtime.jit import JITFunction

    key = (module_name, qualname)
    with _RESOLVE_LOCK:
        if key in _RESOLVED:
            return _RESOLVED[key]
        if "<locals>" in qualname:
            raise PrecompileError(f"kernel {qualname} is defined inside a function; a helper process can only "
                                  f"import module-level kernels: move it to module level, or precompile from a "
                                  f"process without TRITON_INTERPRET=1")
        if module_name == "__main__":
            path = (location or {}).get("file")
            if not path or not os.path.exists(path):
                raise PrecompileError(f"kernel {qualname} is in a __main__ without a file; put it in a module")
            spec = importlib.util.spec_from_file_location("__autotune_main__", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["__autotune_main__"] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        obj: Any = module
        for part in qualname.split("."):
            obj = getattr(obj, part)
        for _ in range(16):
            if isinstance(obj, JITFunction):
                break
            obj = getattr(obj, "fn", None) or getattr(obj, "base_fn", None)
        if not isinstance(obj, JITFunction):
            raise PrecompileError(f"{module_name}:{qualname} is not a @triton.jit kernel in the compile helper "
                                  f"(got {type(obj).__name__}); does its module set TRITON_INTERPRET=1 on import? "
                                  f"Use os.environ.setdefault so the helper's TRITON_INTERPRET=0 wins")
        _RESOLVED[key] = obj
        return obj


# ------------------------------------------------------------------------------------------------ helper processes


class _Helper:
    """A Python process without the interpreter that compiles for us (requests and replies pickled on its pipes)."""

    def __init__(self, env: dict[str, str], fingerprint: tuple) -> None:
        self.fingerprint = fingerprint
        self.log = tempfile.TemporaryFile()
        command = [sys.executable, "-c", "from autotune.precompile import _helper_main; _helper_main()"]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=env, cwd=os.getcwd())

    def call(self, request: dict) -> dict:
        try:
            pickle.dump(request, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
            return pickle.load(self.proc.stdout)
        except (EOFError, BrokenPipeError, OSError, pickle.UnpicklingError) as exc:
            code = self.proc.poll()
            raise RuntimeError(f"the compile helper process died (exit status {code}, {exc.__class__.__name__}); "
                               f"its stderr ends with:\n{self.stderr_tail()}") from None

    def stderr_tail(self, limit: int = 2000) -> str:
        try:
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - limit))
            return self.log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            self.proc.kill()
        finally:
            self.log.close()


def _helper_env() -> tuple[dict[str, str], tuple]:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"
    paths = [p if p else os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # What a compile depends on; TRITON_CACHE_DIR travels with each request instead.
    fingerprint = (tuple(sorted((k, v) for k, v in env.items() if k.startswith(("TRITON_", "MLIR_", "LLVM_"))
                               and k not in ("TRITON_CACHE_DIR", "TRITON_INTERPRET"))), env["PYTHONPATH"])
    return env, fingerprint


class _HelperPool:
    """Helper processes kept across precompile calls (starting one costs the imports of torch and triton)."""

    def __init__(self) -> None:
        self._idle: list[_Helper] = []
        self._all: list[_Helper] = []
        self._lock = threading.Lock()

    def acquire(self) -> _Helper:
        env, fingerprint = _helper_env()
        with self._lock:
            while self._idle:
                helper = self._idle.pop()
                if helper.alive() and helper.fingerprint == fingerprint:
                    return helper
                self._discard(helper)
        helper = _Helper(env, fingerprint)
        with self._lock:
            self._all.append(helper)
        return helper

    def release(self, helper: _Helper) -> None:
        with self._lock:
            if helper.alive():
                self._idle.append(helper)
            else:
                self._discard(helper)

    def _discard(self, helper: _Helper) -> None:
        if helper in self._all:
            self._all.remove(helper)
        helper.close()

    def close(self) -> None:
        with self._lock:
            helpers, self._all, self._idle = self._all, [], []
        for helper in helpers:
            helper.close()


_HELPERS = _HelperPool()
atexit.register(_HELPERS.close)


def _helper_main() -> None:
    """The helper process: read compile requests from stdin, answer on stdout (print()s go to stderr)."""
    os.environ["TRITON_INTERPRET"] = "0"
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    protocol_in = sys.stdin.buffer
    warnings.simplefilter("ignore")
    import triton

    while True:
        try:
            request = pickle.load(protocol_in)
        except EOFError:
            return
        try:
            if request.get("cache_dir"):
                os.environ["TRITON_CACHE_DIR"] = request["cache_dir"]
                triton.knobs.cache.dir = request["cache_dir"]
            jit_fn = _resolve_jit(request["module"], request["qualname"], request)
            constexprs = {k: _decode_constant(v) for k, v in request["constexprs"].items()}
            result = _compile_source(jit_fn, Target(*request["target"]), request["signature"], constexprs,
                                     request["attrs"], request["options"])
            reply = {"ok": True, "result": result}
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as data
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {"ok": False, "error": f"{exc.__class__.__name__}: {exc}" if not _is_compilation_error(exc)
                     else str(exc), "type": exc.__class__.__name__}
        pickle.dump(reply, protocol_out, protocol=pickle.HIGHEST_PROTOCOL)
        protocol_out.flush()


def _is_compilation_error(exc: BaseException) -> bool:
    return type(exc).__name__ == "CompilationError"


class _RemoteCompileError(Exception):
    """A compile error raised in a helper process (its message as the helper formatted it)."""


# ================================================================================================ precompile


@dataclass(frozen=True)
class _Job:
    """One unit of work on the pool: a config for a target. (Passed where the pipeline expects a Config.)"""

    config: Config
    target: Target


class _OutOfResources(Exception):
    pass


class _Plan:
    """Everything the pool threads share for one precompile call."""

    def __init__(self, kernel: Any, args: tuple, kwargs: dict, processes: bool) -> None:
        self.kernel = kernel
        self.args = args
        self.kwargs = kwargs
        self.bound = kernel.bind(args, kwargs)
        self.processes = processes
        self.jit_fn = _jit_function(kernel.base_fn)
        self.heuristics = heuristics_layers(kernel.fn, kernel.base_fn)
        self.location = _kernel_location(kernel.base_fn)
        self.cache_dir = _triton_cache_dir()
        self._binders: dict[Target, tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def binder(self, target: Target) -> tuple[Any, Any]:
        with self._lock:
            found = self._binders.get(target)
            if found is None:
                from triton.compiler import make_backend
                from triton.runtime.jit import create_function_from_signature

                backend = make_backend(target.gpu_target())
                binder = create_function_from_signature(self.jit_fn.signature, self.jit_fn.params, backend)
                found = self._binders[target] = (backend, binder)
            return found

    def launch_kwargs(self, config: Config) -> tuple[tuple, dict]:
        """The positional arguments and keywords a launch of `config` passes to the JIT (derived values and
        `triton.heuristics` included)."""
        args, kwargs, _ = self.kernel.launch_args(config, self.bound, (1,))
        for layer in self.heuristics:
            for name, heuristic in layer.values.items():
                kwargs[name] = heuristic({**dict(zip(layer.arg_names, args)), **kwargs})
        return args, kwargs

    def specialize(self, config: Config, target: Target) -> tuple[dict, dict, dict, dict]:
        """(signature, constexprs, attrs, options) as JITFunction.run builds them for this launch on `target`."""
        from triton import knobs

        backend, binder = self.binder(target)
        args, kwargs = self.launch_kwargs(config)
        # The option defaults JITFunction.run adds before binding (3.6: debug, instrumentation_mode; 3.9 also
        # fpsan_homomorphic_casts): they are part of the options' hash.
        kwargs["debug"] = kwargs.get("debug", getattr(self.jit_fn, "debug", None)) or knobs.runtime.debug
        for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):
            if hasattr(knobs.compilation, name):
                kwargs[name] = getattr(knobs.compilation, name)
        try:
            bound, specialization, options = binder(*args, **kwargs)
        except TypeError as exc:
            raise PrecompileError(f"{self.kernel.name}: cannot bind the arguments for config {dict(config)}: {exc}. "
                                  f"Give every non-constexpr argument (example args or signature=) and a value for "
                                  f"every constexpr (the space, derive=, or signature=)") from None
        options, signature, constexprs, attrs = self.jit_fn._pack_args(backend, kwargs, bound, specialization, options)
        return signature, constexprs, attrs, dict(options.__dict__)


def _jit_function(base: Any) -> Any:
    """A real JITFunction for the kernel: itself, or (under the interpreter) one built from its Python function."""
    from triton.runtime.jit import JITFunction

    if isinstance(base, JITFunction):
        return base
    cached = getattr(base, "_autotune_jit", None)
    if cached is not None:
        return cached
    kwargs = dict(getattr(base, "kwargs", {}) or {})
    jit_fn = JITFunction(base.fn, **kwargs)
    try:
        base._autotune_jit = jit_fn
    except AttributeError:  # pragma: no cover - slots
        pass
    return jit_fn


def _triton_cache_dir() -> str:
    from triton import knobs

    return str(knobs.cache.dir)


def _run_job(plan: _Plan, job: _Job) -> CompiledConfig:
    """Compile one (config, target) on a pool thread: here, or through a helper process under the interpreter."""
    signature, constexprs, attrs, options = plan.specialize(job.config, job.target)
    if plan.processes:
        request = {**plan.location, "target": (job.target.backend, job.target.arch, job.target.warp_size),
                   "signature": signature, "constexprs": {k: _encode_constant(v) for k, v in constexprs.items()},
                   "attrs": attrs, "options": options, "cache_dir": plan.cache_dir}
        helper = _HELPERS.acquire()
        try:
            reply = helper.call(request)
        finally:
            _HELPERS.release(helper)
        if not reply["ok"]:
            raise _RemoteCompileError(reply["error"])
        result = reply["result"]
    else:
        result = _compile_source(plan.jit_fn, job.target, signature, constexprs, attrs, options)
    problem = _over_limits(job.target, shared=result["shared"], n_regs=result["n_regs"],
                           num_warps=result["num_warps"], warp_size=result["warp_size"])
    if problem is not None:
        raise _OutOfResources(problem)
    return CompiledConfig(config=job.config, target=str(job.target), cached=result["cached"],
                          compile_s=result["seconds"], hash=result["hash"], shared_bytes=result["shared"],
                          num_warps=result["num_warps"], n_regs=result["n_regs"], frame_bytes=result["frame_bytes"],
                          path=result["path"])


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, (_RemoteCompileError, _OutOfResources)) or _is_compilation_error(exc):
        return str(exc)
    return f"{exc.__class__.__name__}: {exc}"


def _failure(job: _Job, status: Any, error: Optional[BaseException]) -> FailedConfig:
    kind = "timeout" if getattr(status, "value", status) == "timeout" else (
        "out_of_resources" if isinstance(error, _OutOfResources) else "compile_error")
    return FailedConfig(config=job.config, target=str(job.target), error=_error_text(error) if error else kind,
                        kind=kind)


def _resolve_kernel(kernel: Any, space: Any) -> Any:
    from .decorator import Autotuned

    if isinstance(kernel, str):
        kernel = load_kernel(kernel)
    if isinstance(kernel, Autotuned):
        return kernel
    if space is not None and hasattr(base_kernel(kernel), "arg_names"):
        return Autotuned(kernel, space=space)
    raise PrecompileError(f"precompile() takes an @autotune-decorated kernel (or 'module:kernel'); got {kernel!r}. "
                          f"For a bare @triton.jit kernel pass space= as well.")


def _winner_configs(kernel: Any, target: Optional[Target]) -> tuple[list[Config], Optional[str]]:
    """The kernel's cached winners valid for its current source and space, preferring those tuned on `target`'s
    architecture; and a note when none was tuned on it."""
    from . import cache as _cache

    records = [e.record for e in _cache.disk_entries(kernel.name) if e.record is not None]
    records += list(kernel.cache.records().values())
    valid = [r for r in records if r.source_hash == kernel.cache.source_hash
             and r.space_checksum == kernel.cache.space_checksum and r.winner in set(kernel.configs)]
    if not valid:
        stale = len(records)
        raise PrecompileError(f"winners_only=True: no cached winner of {kernel.name} in {_cache._root()} matches the "
                              f"kernel's current source and space ({stale} stale or other entries). Tune it first "
                              f"(call it on a GPU, or in the interpreter), import an archive, or drop winners_only.")
    matching = valid
    note = None
    if target is not None:
        tag = f"sm{target.arch}" if target.backend == "cuda" else str(target.arch)
        matching = [r for r in valid if r.device.split()[-1:] == [tag] or tag in r.device.split()]
        if not matching:
            devices = sorted({r.device for r in valid})
            note = (f"note: no winner of {kernel.name} was tuned on {target}; compiled the winners tuned on "
                    f"{', '.join(devices)}")
            matching = valid
    return list(dict.fromkeys(r.winner for r in matching)), note


def precompile(kernel: Any, *example_args: Any, signature: Union[Mapping[str, Any], str, None] = None,
               targets: Optional[Sequence[Union[str, Target, Any]]] = None, space: Any = None,
               winners_only: bool = False, workers: Optional[int] = None, timeout_s: Optional[float] = None,
               processes: Optional[bool] = None) -> PrecompileReport:
    """Compile every config of `kernel`'s space (or only its cached winners) for each target, ahead of time.

    - `kernel`: an `@autotune` kernel, or `"module:kernel"` (a bare @triton.jit kernel needs `space=`).
    - `*example_args`: arguments as a launch passes them (tensors, sizes, strides; a torch dtype stands for a
      tensor of that dtype); or `signature=` instead: a dict / string of argument types, see `parse_signature`.
      The compiled kernels are found by launches whose arguments specialize the same way.
    - `targets`: `["cuda:90", "cuda:80", "hip:gfx942"]` (or one): no GPU needed. None: the active GPU, through the
      kernel's JIT, so this process's later launches compile nothing.
    - `space`: another space to compile instead of the kernel's; `winners_only`: only the winners in the
      tuning cache (for each target, those tuned on that architecture where there are any).
    - `workers`: compile threads (default `Tuning.compile_workers`; 0 compiles serially on this thread);
      `timeout_s`: per compile; `processes`: compile in helper processes (default: only under TRITON_INTERPRET=1,
      where it is required).

    A config that fails to compile, or compiles to a kernel over the target's shared memory / register /
    thread limits, is reported in `.failed` with its error; it does not stop the others. Returns a
    `PrecompileReport`.
    """
    from .compilers import TargetCompiler
    from .options import Tuning
    from .pipeline import compile_in_order_of_completion

    _check_triton()
    tuned = _resolve_kernel(kernel, space)
    if signature is not None and example_args:
        raise PrecompileError("precompile(): give example arguments or signature=, not both")
    if signature is None and not example_args:
        raise PrecompileError(f"precompile({tuned.name}): give example arguments (as for a launch) or signature= "
                              f"(e.g. {{'x': '*fp32', 'n': 'i32'}}); the arguments decide the specialization")
    if signature is not None:
        args: tuple = ()
        kwargs = parse_signature(signature)
        unknown = sorted(set(kwargs) - set(tuned.arg_names))
        if unknown:
            raise PrecompileError(f"signature names {unknown}, which are not arguments of {tuned.name}; "
                                  f"arguments: {tuned.arg_names}")
    else:
        args, kwargs = tuple(_wrap_dtype(a) for a in example_args), {}
    if len(args) > len(tuned.arg_names):
        raise PrecompileError(f"{tuned.name} takes {len(tuned.arg_names)} arguments ({tuned.arg_names}); "
                              f"got {len(args)} example arguments")
    _check_arguments(tuned, args, kwargs)
    workers = Tuning().compile_workers if workers is None else int(workers)
    if workers < 0:
        raise PrecompileError(f"workers={workers}: use 0 (serial) or more")
    interpreted = is_interpreted(tuned.base_fn)

    if targets is None:
        if interpreted:
            raise PrecompileError("targets=None compiles for the active GPU through Triton's JIT, but this process "
                                  "runs Triton's interpreter (TRITON_INTERPRET=1): give explicit targets, e.g. "
                                  "targets=['cuda:90']")
        return _precompile_jit(tuned, args, kwargs, space, winners_only, workers, timeout_s)

    if isinstance(targets, (str, Target)) or hasattr(targets, "warp_size"):
        targets = [targets]  # one target given bare
    target_list = list(dict.fromkeys(parse_target(t) for t in targets))
    if not target_list:
        raise PrecompileError("targets=[] names no target; give e.g. ['cuda:90'], or None for the active GPU")
    if processes is False and interpreted:
        raise PrecompileError("processes=False cannot compile under TRITON_INTERPRET=1: this process's Triton is "
                              "the interpreter; leave processes unset")
    use_processes = interpreted if processes is None else bool(processes)
    plan = _Plan(tuned, args, kwargs, use_processes)
    report = PrecompileReport(kernel=tuned.name, targets=[str(t) for t in target_list], workers=workers,
                              processes=use_processes, triton_cache_dir=plan.cache_dir)
    jobs: list[_Job] = []
    for target in target_list:
        if winners_only:
            configs, note = _winner_configs(tuned, target)
            if note:
                report.notes.append(note)
        else:
            configs = as_space(space).configs() if space is not None else list(tuned.configs)
        jobs.extend(_Job(c, target) for c in configs)

    started = time.perf_counter()
    compiler = TargetCompiler(lambda job: _run_job(plan, job))
    with compile_in_order_of_completion(jobs, compiler, workers=workers, timeout_s=timeout_s) as outcomes:
        for outcome in outcomes:
            job: _Job = outcome.config  # type: ignore[assignment]
            if outcome.status.value == "ok":
                report.compiled.append(outcome.result)
            else:
                report.failed.append(_failure(job, outcome.status, outcome.error))
    report.wall_s = time.perf_counter() - started
    logger.info("%s", report.summary())
    return report


def _precompile_jit(tuned: Any, args: tuple, kwargs: dict, space: Any, winners_only: bool, workers: int,
                    timeout_s: Optional[float]) -> PrecompileReport:
    """targets=None: compile through the kernel's JIT for the active GPU (fills the JIT's in-memory cache)."""
    from .compilers import JitCompiler
    from .pipeline import compile_in_order_of_completion

    target = _active_target()
    bound = tuned.bind(args, kwargs)
    if winners_only:
        configs, note = _winner_configs(tuned, target)
    else:
        configs, note = (as_space(space).configs() if space is not None else list(tuned.configs)), None
    report = PrecompileReport(kernel=tuned.name, targets=[str(target)], workers=workers,
                              triton_cache_dir=_triton_cache_dir(), notes=[note] if note else [])

    def prepare(config: Config) -> tuple:
        return tuned.launch_args(config, bound, (1,))

    listening = _LISTENER.install()
    session = _LISTENER.session()
    started = time.perf_counter()
    try:
        with compile_in_order_of_completion(configs, JitCompiler(tuned.fn, prepare), workers=workers,
                                            timeout_s=timeout_s) as outcomes:
            for outcome in outcomes:
                job = _Job(outcome.config, target)
                if outcome.status.value != "ok":
                    report.failed.append(_failure(job, outcome.status, outcome.error))
                    continue
                compiled = outcome.result
                try:
                    compiled._init_handles()  # loads it: Triton's own shared memory / threads checks
                except Exception as exc:  # noqa: BLE001 - OutOfResources and load errors are per config
                    kind = "out_of_resources" if type(exc).__name__ == "OutOfResources" else "compile_error"
                    report.failed.append(FailedConfig(outcome.config, str(target), _error_text(exc), kind))
                    continue
                # No compile event for its hash: triton.compile was not called, the JIT's memory had it.
                cached = session.get(compiled.hash, True) if listening else None
                info = _describe(compiled, target, outcome.compile_s or 0.0, cached)
                n_regs = getattr(compiled, "n_regs", None)
                problem = _over_limits(target, shared=None, n_regs=n_regs, num_warps=info["num_warps"],
                                       warp_size=info["warp_size"])
                if problem is not None:
                    report.failed.append(FailedConfig(outcome.config, str(target), problem, "out_of_resources"))
                    continue
                report.compiled.append(CompiledConfig(
                    config=outcome.config, target=str(target), cached=info["cached"], compile_s=info["seconds"],
                    hash=info["hash"], shared_bytes=info["shared"], num_warps=info["num_warps"],
                    n_regs=n_regs if n_regs is not None else info["n_regs"],
                    n_spills=getattr(compiled, "n_spills", None),
                    frame_bytes=info["frame_bytes"], path=info["path"]))
    finally:
        _LISTENER.close(session)
    report.wall_s = time.perf_counter() - started
    logger.info("%s", report.summary())
    return report


def _check_arguments(tuned: Any, args: tuple, kwargs: dict) -> None:
    """Fail fast, once, on arguments that cannot bind whatever the config: unknown names, missing arguments."""
    import inspect

    params = inspect.signature(base_kernel(tuned.base_fn).fn).parameters
    given = set(tuned.arg_names[:len(args)]) | set(kwargs)
    constexprs = set(tuned.constexpr_names)
    missing = [name for name, p in params.items() if name not in given and name not in constexprs
               and p.default is inspect.Parameter.empty]
    if missing:
        raise PrecompileError(f"{tuned.name}: no value for {missing}; give every non-constexpr argument "
                              f"(arguments: {tuned.arg_names})")


def _check_triton() -> None:
    from triton.runtime.jit import JITFunction

    try:
        from triton.runtime.jit import create_function_from_signature  # noqa: F401
    except ImportError:
        create_function_from_signature = None  # type: ignore[assignment]
    if create_function_from_signature is None or not hasattr(JITFunction, "_pack_args"):
        import triton

        raise PrecompileError(f"precompile needs Triton {_SUPPORTED_TRITON} (the JIT's binder and _pack_args); "
                              f"this is Triton {triton.__version__}")


def load_kernel(spec: str) -> Any:
    """The object named by `"package.module:attr"` (or `"path/to/file.py:attr"`; `"module:factory()"` calls
    a no-argument factory), as the CLI takes kernels."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PrecompileError(f"kernel {spec!r}: write it as module:kernel (e.g. kernels.matmul:matmul_kernel) "
                              f"or path/to/file.py:kernel")
    call = attr.endswith("()")
    attr = attr[:-2] if call else attr
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name).resolve()
            if str(path.parent) not in sys.path:  # as running the file would; helper processes import it by name
                sys.path.insert(0, str(path.parent))
            spec_obj = importlib.util.spec_from_file_location(path.stem, path)
            if spec_obj is None or spec_obj.loader is None:
                raise PrecompileError(f"kernel {spec!r}: cannot load {path}")
            module = importlib.util.module_from_spec(spec_obj)
            sys.modules[path.stem] = module
            spec_obj.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PrecompileError(f"kernel {spec!r}: cannot import {module_name} ({exc}); run from the directory that "
                              f"contains it or set PYTHONPATH") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PrecompileError(f"kernel {spec!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj() if call else obj


# ================================================================================================ archives


ARCHIVE_FORMAT = "autotune-archive"
ARCHIVE_FORMAT_VERSION = 1
_MANIFEST = "manifest.json"
_RECORDS_PREFIX = "records"
_TRITON_PREFIX = "triton"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$")
_MAX_MEMBER_BYTES = 1 << 30


class ArchiveFile(BaseModel):
    """A member of the archive with its checksum."""

    model_config = ConfigDict(extra="forbid")
    path: str
    sha256: str
    size: int


class ArchiveRecord(BaseModel):
    """A tuned winner in the archive (its JSON record is the member at `path`)."""

    model_config = ConfigDict(extra="forbid")
    path: str
    kernel: str
    key: list[Any]
    dtypes: list[str]
    device: str
    winner: dict[str, Any]
    timestamp: float
    triton_version: str


class ArchiveBinary(BaseModel):
    """One compiled kernel from Triton's cache: the files of one cache directory entry."""

    model_config = ConfigDict(extra="forbid")
    kernel: str
    dir: str
    target: str
    triton_version: Optional[str] = None
    files: list[str]


class ArchiveManifest(BaseModel):
    """`manifest.json` of an archive: what it holds and the versions it was made with."""

    model_config = ConfigDict(extra="forbid")
    format: str = ARCHIVE_FORMAT
    format_version: int = ARCHIVE_FORMAT_VERSION
    created: float = Field(default_factory=time.time)
    autotune_version: str
    triton_version: str
    torch_version: str
    python_version: str
    kernels: list[str]
    targets: list[str]
    records: list[ArchiveRecord] = Field(default_factory=list)
    binaries: list[ArchiveBinary] = Field(default_factory=list)
    files: list[ArchiveFile] = Field(default_factory=list)


@dataclass
class ImportReport:
    """What `import_archive` did: imported, skipped (with why), and warnings."""

    manifest: ArchiveManifest
    records_imported: list[str] = field(default_factory=list)
    records_skipped: list[tuple[str, str]] = field(default_factory=list)
    binaries_imported: list[str] = field(default_factory=list)
    binaries_skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"imported {len(self.records_imported)} records ({len(self.records_skipped)} skipped) and "
                f"{len(self.binaries_imported)} compiled kernels ({len(self.binaries_skipped)} skipped) for "
                f"{', '.join(self.manifest.kernels) or 'no kernel'}")

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"  skipped record {p}: {why}" for p, why in self.records_skipped]
        lines += [f"  skipped binary {p}: {why}" for p, why in self.binaries_skipped]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"records_imported": self.records_imported, "records_skipped": self.records_skipped,
                "binaries_imported": self.binaries_imported, "binaries_skipped": self.binaries_skipped,
                "warnings": self.warnings, "manifest": self.manifest.model_dump()}


def _kernel_names(kernels: Optional[Iterable[Any]]) -> Optional[list[str]]:
    if kernels is None:
        return None
    if isinstance(kernels, (str, bytes)) or not isinstance(kernels, Iterable):
        kernels = [kernels]
    names = []
    for k in kernels:
        if isinstance(k, str):
            names.append(k)
        elif getattr(getattr(k, "cache", None), "kernel_name", None):
            names.append(k.cache.kernel_name)
        elif isinstance(getattr(k, "name", None), str):
            names.append(k.name)
        else:
            raise ArchiveError(f"kernels=[...]: {k!r} is neither a kernel name nor an autotuned kernel")
    return list(dict.fromkeys(names))


def _triton_entries(triton_dir: Path, names: Optional[set[str]]) -> list[tuple[str, Path, dict, list[str]]]:
    """Complete entries of Triton's cache directory: (kernel name, dir, metadata, file names), for `names` or all."""
    out = []
    try:
        subdirs = sorted(p for p in triton_dir.iterdir() if p.is_dir())
    except OSError:
        return out
    for d in subdirs:
        try:
            groups = [p for p in d.iterdir() if p.name.startswith("__grp__") and p.name.endswith(".json")]
        except OSError:
            continue
        for grp in groups:
            kernel = grp.name[len("__grp__"):-len(".json")]
            if names is not None and kernel not in names:
                continue
            try:
                children = json.loads(grp.read_text())["child_paths"]
                metadata = json.loads((d / f"{kernel}.json").read_text())
            except (OSError, ValueError, KeyError, TypeError):
                continue
            files = sorted({os.path.basename(p) for p in children.values()} | {os.path.basename(c) for c in children})
            if all((d / f).is_file() for f in files) and all(_SAFE_NAME.match(f) for f in files):
                out.append((kernel, d, metadata, files))
    return out


def _target_of(metadata: Mapping[str, Any]) -> str:
    target = metadata.get("target") or {}
    if isinstance(target, Mapping) and "backend" in target:
        return f"{target['backend']}:{target.get('arch')}"
    return "unknown"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_archive(path: Union[str, os.PathLike], kernels: Optional[Iterable[Any]] = None, *,
                   cache_dir: Union[str, os.PathLike, None] = None,
                   triton_cache_dir: Union[str, os.PathLike, None] = None) -> ArchiveManifest:
    """Write the tuned winners (and the compiled binaries) of `kernels` (names or kernels; None: every kernel of
    the tuning cache) to the .tar.gz `path`; returns its manifest.

    Records come from the tuning cache (`cache_dir`, default AUTOTUNE_CACHE_DIR...); binaries are the entries
    of Triton's cache (`triton_cache_dir`, default `triton.knobs.cache.dir`) compiled from a kernel of that
    name (precompile or launches put them there), for every target found.
    """
    import torch
    import triton

    from . import __version__ as autotune_version
    from .cache import _record_json, disk_entries, kernel_dirname

    names = _kernel_names(kernels)
    entries = [e for e in disk_entries(None, cache_dir) if e.record is not None]
    if names is not None:
        entries = [e for e in entries if e.record.kernel in set(names)]
    kernel_names = names if names is not None else sorted({e.record.kernel for e in entries})
    triton_dir = Path(triton_cache_dir) if triton_cache_dir is not None else Path(_triton_cache_dir())
    binaries = _triton_entries(triton_dir, set(kernel_names))
    if names is not None:
        missing = [n for n in names if not any(e.record.kernel == n for e in entries)
                   and not any(b[0] == n for b in binaries)]
        if missing:
            raise ArchiveError(f"nothing to export for {missing}: no tuned records in the tuning cache and no compiled "
                               f"kernels of that name in {triton_dir}; tune or precompile first, or check the names")
    if not entries and not binaries:
        raise ArchiveError(f"nothing to export: the tuning cache has no records and {triton_dir} no compiled kernels")

    members: dict[str, bytes] = {}
    manifest = ArchiveManifest(autotune_version=str(autotune_version), triton_version=str(triton.__version__),
                               torch_version=str(torch.__version__), python_version=sys.version.split()[0],
                               kernels=list(kernel_names), targets=[])
    for e in entries:
        rec = e.record
        member = f"{_RECORDS_PREFIX}/{kernel_dirname(rec.kernel)}/{e.path.name}"
        members[member] = _record_json(rec)
        manifest.records.append(ArchiveRecord(path=member, kernel=rec.kernel, key=list(rec.key),
                                              dtypes=list(rec.dtypes), device=rec.device, winner=dict(rec.winner),
                                              timestamp=rec.timestamp, triton_version=rec.triton_version))
    for kernel, d, metadata, files in binaries:
        for f in files:
            members[f"{_TRITON_PREFIX}/{d.name}/{f}"] = (d / f).read_bytes()
        manifest.binaries.append(ArchiveBinary(kernel=kernel, dir=d.name, target=_target_of(metadata),
                                               triton_version=metadata.get("triton_version"), files=files))
    manifest.targets = sorted({b.target for b in manifest.binaries})
    manifest.files = [ArchiveFile(path=p, sha256=_sha256(data), size=len(data)) for p, data in sorted(members.items())]

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    now = time.time()
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            manifest_json = manifest.model_dump_json(indent=1).encode("utf-8")
            for name, data in [(_MANIFEST, manifest_json)] + sorted(members.items()):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), now, 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return manifest


def _check_member(member: tarfile.TarInfo) -> PurePosixPath:
    """Refuse anything but a regular file at a relative path without '..' inside the archive's known folders."""
    name = member.name
    path = PurePosixPath(name)
    if not member.isreg():
        raise ArchiveError(f"unsafe archive: member {name!r} is not a regular file (links and devices are refused)")
    if name.startswith(("/", "\\")) or path.is_absolute() or re.match(r"^[A-Za-z]:", name) or ".." in path.parts \
            or "\\" in name:
        raise ArchiveError(f"unsafe archive: member {name!r} has an absolute path or '..'")
    if member.size > _MAX_MEMBER_BYTES:
        raise ArchiveError(f"archive member {name!r} is {member.size} bytes; refusing members over 1 GiB")
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is not None:  # Python's own 'data' extraction filter, as a second opinion
        try:
            data_filter(member, tempfile.gettempdir())
        except tarfile.FilterError as exc:
            raise ArchiveError(f"unsafe archive: member {name!r} ({exc})") from None
    parts = path.parts
    if name == _MANIFEST:
        return path
    if len(parts) == 3 and parts[0] in (_RECORDS_PREFIX, _TRITON_PREFIX) \
            and all(_SAFE_NAME.match(p) for p in parts[1:]):
        return path
    raise ArchiveError(f"unexpected archive member {name!r}: an autotune archive holds {_MANIFEST}, "
                       f"{_RECORDS_PREFIX}/<kernel>/<entry>.json and {_TRITON_PREFIX}/<entry>/<file>")


def _read_archive(path: Union[str, os.PathLike]) -> tuple[ArchiveManifest, dict[str, bytes]]:
    """Read and check every member (nothing is extracted to disk here): safe names, checksums, the manifest."""
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                _check_member(member)
                if member.name in members:
                    raise ArchiveError(f"archive member {member.name!r} appears twice")
                handle = tar.extractfile(member)
                members[member.name] = handle.read() if handle is not None else b""
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"{path}: not a readable .tar.gz archive ({exc.__class__.__name__}: {exc})") from None
    if _MANIFEST not in members:
        raise ArchiveError(f"{path}: no {_MANIFEST}; not an autotune archive (make one with `autotune export`)")
    try:
        manifest = ArchiveManifest.model_validate_json(members[_MANIFEST])
    except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError or JSON errors
        raise ArchiveError(f"{path}: invalid {_MANIFEST} ({str(exc).splitlines()[0]})") from None
    if manifest.format != ARCHIVE_FORMAT or manifest.format_version > ARCHIVE_FORMAT_VERSION:
        raise ArchiveError(f"{path}: archive format {manifest.format!r} v{manifest.format_version}; this autotune "
                           f"reads {ARCHIVE_FORMAT} up to v{ARCHIVE_FORMAT_VERSION}: upgrade autotune")
    listed = {f.path: f for f in manifest.files}
    for name, data in members.items():
        if name == _MANIFEST:
            continue
        entry = listed.get(name)
        if entry is None:
            raise ArchiveError(f"{path}: member {name!r} is not listed in the manifest")
        if entry.size != len(data) or entry.sha256 != _sha256(data):
            raise ArchiveError(f"{path}: member {name!r} does not match its checksum; the archive is corrupt")
    missing = sorted(set(listed) - set(members))
    if missing:
        raise ArchiveError(f"{path}: the manifest lists missing members {missing[:5]}; the archive is truncated")
    return manifest, members


def import_archive(path: Union[str, os.PathLike], *, force: bool = False,
                   cache_dir: Union[str, os.PathLike, None] = None,
                   triton_cache_dir: Union[str, os.PathLike, None] = None) -> ImportReport:
    """Install an archive made by `export_archive`: winners into the tuning cache, binaries into Triton's cache.

    Refuses an archive made with another Triton version (its records would be stale and its binaries never
    looked up here) unless `force=True`, which imports with a warning. A record never replaces a newer entry
    of the same (kernel, device, key, dtypes): the newer timestamp wins and the skip is reported. Members are
    checked before anything is written (regular files at safe relative paths, checksums from the manifest).
    """
    import triton

    from .cache import CacheEntryError, _acquire, _atomic_write, entry_path, load_record
    from .record import SCHEMA_VERSION, TuningRecord

    manifest, members = _read_archive(path)
    report = ImportReport(manifest=manifest)
    local = str(triton.__version__)
    if manifest.triton_version != local:
        message = (f"{path} was made with Triton {manifest.triton_version}, this is Triton {local}: its records would "
                   f"be tuned again and its binaries never found (Triton's cache key includes its version)")
        if not force:
            raise ArchiveError(message + "; re-export with the same Triton, or pass force=True (--force) to import "
                               "anyway")
        report.warnings.append(message)
        warnings.warn(message, stacklevel=2)

    root = Path(cache_dir) if cache_dir is not None else None
    for rec_info in manifest.records:
        data = members[rec_info.path]
        try:
            obj = json.loads(data)
            if obj.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"schema version {obj.get('schema_version')!r}, this autotune reads {SCHEMA_VERSION}")
            record = TuningRecord.model_validate(obj)
        except Exception as exc:  # noqa: BLE001
            report.records_skipped.append((rec_info.path, f"not a valid record ({str(exc).splitlines()[0]})"))
            continue
        dest = entry_path(record.kernel, record.device, record.key, record.dtypes, root)
        lock = _acquire(dest, f"{record.kernel} import")
        try:
            try:
                existing = load_record(dest)
            except FileNotFoundError:
                existing = None
            except (OSError, CacheEntryError):
                existing = None  # corrupt or unreadable: replaced by a good record
            if existing is not None and existing.timestamp > record.timestamp:
                report.records_skipped.append((rec_info.path, f"the entry at {dest} is newer "
                                               f"({_when(existing.timestamp)} > {_when(record.timestamp)}); kept it"))
                continue
            if existing is not None and existing.timestamp == record.timestamp and existing.winner == record.winner:
                report.records_skipped.append((rec_info.path, f"already present at {dest}"))
                continue
            _atomic_write(dest, data if data.endswith(b"\n") else data + b"\n")
            report.records_imported.append(str(dest))
        finally:
            lock.release()

    triton_dir = Path(triton_cache_dir) if triton_cache_dir is not None else Path(_triton_cache_dir())
    for binary in manifest.binaries:
        if not _SAFE_NAME.match(binary.dir) or not _SAFE_NAME.match(binary.kernel):
            report.binaries_skipped.append((binary.dir, "unsafe directory or kernel name"))
            continue
        dest = triton_dir / binary.dir
        group = dest / f"__grp__{binary.kernel}.json"
        if group.is_file() and all((dest / f).is_file() for f in binary.files):
            report.binaries_skipped.append((f"{binary.dir} ({binary.kernel}, {binary.target})",
                                            "already in Triton's cache"))
            continue
        dest.mkdir(parents=True, exist_ok=True)
        for name in binary.files:
            _write_file(dest / name, members[f"{_TRITON_PREFIX}/{binary.dir}/{name}"])
        # Triton's group file lists absolute paths: rewrite it for this machine's cache directory, last.
        children = {name: str(dest / name) for name in binary.files}
        _write_file(group, json.dumps({"child_paths": children}).encode("utf-8"))
        report.binaries_imported.append(f"{binary.dir} ({binary.kernel}, {binary.target})")
    return report


def _write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


# ================================================================================================ command line


def _cmd_precompile(args: Any) -> int:
    if args.cache_dir:
        os.environ["AUTOTUNE_CACHE_DIR"] = args.cache_dir
    if args.triton_cache_dir:
        os.environ["TRITON_CACHE_DIR"] = args.triton_cache_dir
    if args.signature is None:
        print("autotune precompile: --signature is required: the argument types decide the specialization, e.g. "
              "--signature 'x=*fp32,y=*fp32,out=*fp32,n=i32:16' (pointers '*fp16'..., sizes 'i32' or 'i32:16' when "
              "a multiple of 16, literal 1 for unit strides)", file=sys.stderr)
        return 2
    try:
        report = precompile(args.kernel, signature=args.signature, targets=args.targets,
                            winners_only=args.winners_only, workers=args.workers, timeout_s=args.timeout)
    except PrecompileError as exc:
        print(f"autotune precompile: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=1) if args.json else str(report))
    compiled_targets = {c.target for c in report.compiled}
    return 0 if all(t in compiled_targets for t in report.targets) else 1


def _cmd_export(args: Any) -> int:
    try:
        manifest = export_archive(args.archive, args.kernels, cache_dir=args.cache_dir,
                                  triton_cache_dir=args.triton_cache_dir)
    except ArchiveError as exc:
        print(f"autotune export: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.archive}: {len(manifest.records)} records and {len(manifest.binaries)} compiled kernels of "
          f"{', '.join(manifest.kernels)} for {', '.join(manifest.targets) or 'no target'} "
          f"(Triton {manifest.triton_version})")
    return 0


def _cmd_import(args: Any) -> int:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the report prints them
            report = import_archive(args.archive, force=args.force, cache_dir=args.cache_dir,
                                    triton_cache_dir=args.triton_cache_dir)
    except ArchiveError as exc:
        print(f"autotune import: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report.to_dict(), indent=1, default=str) if args.json else str(report))
    return 0


def register_cli(subparsers: Any) -> None:
    """`autotune precompile`, `autotune export`, `autotune import` (registered by autotune.cli)."""
    dirs = _argparse_parent()
    p = subparsers.add_parser(
        "precompile", parents=[dirs], help="compile a kernel's configs for GPU targets ahead of time",
        description="Compile every config of an @autotune kernel's space (or only its cached winners) for each "
                    "--target into Triton's cache, without a GPU. Example: autotune precompile "
                    "mypkg.kernels:matmul --target cuda:90 --target cuda:80 --signature "
                    "'a=*fp16,b=*fp16,c=*fp16,M=i32,N=i32,K=i32,stride_am=i32:16,stride_ak=1,...'")
    p.add_argument("kernel", metavar="MODULE:KERNEL", help="the decorated kernel, e.g. mypkg.kernels:matmul")
    p.add_argument("--target", dest="targets", action="append", metavar="TARGET",
                   help="cuda:90, cuda:80, hip:gfx942, ...; repeat for several (default: the active GPU)")
    p.add_argument("--signature", metavar="SIG",
                   help="argument types: 'x=*fp32,y=*fp32,n=i32:16' or a JSON object (see parse_signature)")
    p.add_argument("--winners-only", action="store_true", help="only the winners in the tuning cache")
    p.add_argument("--workers", type=int, default=None, help="compile threads (0: serial)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per compile")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.set_defaults(func=_cmd_precompile)

    p = subparsers.add_parser("export", parents=[dirs], help="write tuned winners and compiled kernels to an archive",
                              description="Write the tuning cache's records and the kernels' compiled binaries from "
                                          "Triton's cache to ARCHIVE (.tar.gz) with a manifest.")
    p.add_argument("archive", metavar="ARCHIVE")
    p.add_argument("--kernel", dest="kernels", action="append", metavar="NAME",
                   help="only this kernel (repeat for several; default: every kernel of the tuning cache)")
    p.set_defaults(func=_cmd_export)

    p = subparsers.add_parser("import", parents=[dirs], help="install an archive made by `autotune export`",
                              description="Install ARCHIVE's records into the tuning cache (a newer local entry is "
                                          "kept) and its binaries into Triton's cache.")
    p.add_argument("archive", metavar="ARCHIVE")
    p.add_argument("--force", action="store_true", help="import even if the archive was made with another Triton")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.set_defaults(func=_cmd_import)


def _argparse_parent() -> Any:
    import argparse

    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--cache-dir", metavar="DIR", help="the tuning cache (default: AUTOTUNE_CACHE_DIR, ...)")
    parent.add_argument("--triton-cache-dir", metavar="DIR",
                        help="Triton's compile cache (default: TRITON_CACHE_DIR, else ~/.triton/cache)")
    return parent
