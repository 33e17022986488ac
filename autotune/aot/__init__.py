"""autotune.aot: ahead-of-time compilation of a kernel's configs, and moving tuned kernels between machines.

What
----
`precompile(kernel, *example_args | signature=..., targets=["cuda:90", "cuda:80"])` compiles every config
of an `@autotune` kernel's space (or only its cached winners) for each target into Triton's own compile
cache (`triton.knobs.cache.dir`, i.e. TRITON_CACHE_DIR, else ~/.triton/cache), in the compile thread pool
of `autotune.engine.pipeline`, and returns a `PrecompileReport` (compiled with cache hits counted, failed with
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

Modules
-------
`targets` (targets, resource limits), `cubin` (registers from a cubin), `standins` (`signature=` stand-ins),
`specialize` (the launch's specialization, by the JIT's own binder), `triton_compile` (one compile),
`helpers` (helper processes under TRITON_INTERPRET=1 and their pipe protocol), `events` (Triton's compile
listener), `report`, `call_checks` (precompile's arguments checked against the kernel before any compile),
`api` (`precompile`, `load_kernel`), `archive` (`export_archive`, `import_archive`, the manifest),
`triton_cache` (Triton's cache entries of a kernel, told apart from another module's kernel of the same name by
the source location in their IR), `archive_checks` (what an untrusted archive must pass), `archive_install`
(installing it: binaries, then records); the CLI subcommands are in `autotune.cli.aot`.

Resource checks
---------------
Triton reports too much shared memory or too many threads only when a kernel is loaded on a GPU.
After each compile, the kernel's shared memory (`metadata.shared`), its registers per thread (read
from the cubin's EIATTR_REGCOUNT, or `CompiledKernel.n_regs` after a load on a GPU) and its threads
per block are compared with the target's limits (`limits_for`); a config over them is reported as
failed (`kind="out_of_resources"`). Register spills (`n_spills` on a GPU, the stack frame size from the
cubin otherwise) are reported, not failed. For a `hip:` target the VGPRs and scratch bytes come from the
AMDGCN's metadata (`amdgcn.py`); AMD limits are not checked (over its VGPR budget a kernel spills). A config's
`occupancy` is lowered with each target's figures before its compile (`autotune/kernel/occupancy.py`); one the target
cannot reach fails as `out_of_resources` without compiling.

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

from ..errors import ArchiveError, PrecompileError
from .api import load_kernel, precompile
from .archive import ArchiveManifest, ImportReport, export_archive, import_archive
from .cubin import cubin_resource_usage
from .report import CompiledConfig, FailedConfig, PrecompileReport
from .standins import parse_signature
from .targets import ResourceLimits, Target, limits_for, parse_target

__all__ = [
    "precompile",
    "PrecompileReport",
    "CompiledConfig",
    "FailedConfig",
    "PrecompileError",
    "Target",
    "parse_target",
    "ResourceLimits",
    "limits_for",
    "parse_signature",
    "cubin_resource_usage",
    "export_archive",
    "import_archive",
    "ArchiveManifest",
    "ImportReport",
    "ArchiveError",
    "load_kernel",
]
