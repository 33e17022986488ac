"""precompile for explicit targets (no GPU), the report, resource checks, export/import, the CLI.

Real compiles are few and shared: one 4-config matmul space for cuda:90 and cuda:80 (module fixture), a
4-config kernel with failing configs for cuda:80, and a 2-config vector add for cuda:90. Under
TRITON_INTERPRET=1 the compiles run in autotune's helper processes (started once, reused).
"""

from __future__ import annotations

import io
import json
import os
import pkgutil
import re
import subprocess
import sys
import tarfile
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from cache_files import write_record
from kernels_for_tests import add_kernel

import autotune

# `autotune.precompile` is the function (the public name); the package is `autotune.aot`.
import autotune.aot as aot
import autotune.aot.api as aot_api
import autotune.compat as autotune_compat
from autotune import FixedSpace
from autotune import autotune as autotune_decorator
from autotune.aot import (
    ArchiveError,
    CompiledConfig,
    PrecompileError,
    cubin_resource_usage,
    export_archive,
    import_archive,
    limits_for,
    parse_signature,
    parse_target,
    precompile,
)
from autotune.aot.targets import over_limits
from autotune.errors import SpaceError
from autotune.storage import disk_entries, load_record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kernels import matmul  # noqa: E402

ON_GPU = os.environ.get("TRITON_INTERPRET", "0") != "1" and torch.cuda.is_available()

# ---------------------------------------------------------------------------------------------- kernels

tuned_add = autotune_decorator(space={"BLOCK": (64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(add_kernel)
ADD_SIGNATURE = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32:16"}


@triton.jit
def tile_transpose_kernel(x, out, BM: tl.constexpr, BN: tl.constexpr):
    """out = x.T for one BM x BN tile; large tiles need a lot of shared memory for the transpose."""
    tl.static_assert(BM * BN <= 65536, "tile too large")
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    t = tl.load(x + rm[:, None] * BN + rn[None, :])
    tl.store(out + rn[:, None] * BM + rm[None, :], tl.trans(t))


FAILING_SPACE = FixedSpace(
    [
        {"BM": 32, "BN": 32, "num_warps": 4},  # compiles
        {"BM": 48, "BN": 32, "num_warps": 4},  # tl.arange needs a power of 2
        {"BM": 512, "BN": 256, "num_warps": 4},  # tl.static_assert
        {"BM": 256, "BN": 256, "num_warps": 8},  # compiles to 256 KiB of shared memory: over sm_80's 163 KiB
    ]
)
tuned_transpose = autotune_decorator(space=FAILING_SPACE, grid=(1,))(tile_transpose_kernel)


@triton.jit
def scale_kernel(x, out, n, BLOCK: tl.constexpr, SCALE: tl.constexpr):
    """out = x * SCALE: SCALE is a constexpr the space does not tune (a launch, or signature=, gives it)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) * SCALE, mask=offs < n)


tuned_scale = autotune_decorator(space={"BLOCK": (64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(scale_kernel)


@triton.jit
def act_kernel(x, out, n, BLOCK: tl.constexpr, ACT: tl.constexpr):
    """out = ACT(x): ACT is a @triton.jit helper passed as a constexpr value."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, ACT(tl.load(x + offs, mask=offs < n)), mask=offs < n)


tuned_act = autotune_decorator(space={"BLOCK": (64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(act_kernel)


@triton.jit
def even_kernel(x, out, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    """A copy without a mask when n is a multiple of BLOCK (EVEN, computed from n per config)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out + offs, tl.load(x + offs))
    else:
        tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


tuned_even_heuristic = autotune_decorator(space={"BLOCK": (64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(
    triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})(even_kernel)
)
tuned_even_derived = autotune_decorator(
    space={"BLOCK": (64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)", derive={"EVEN": "n % $BLOCK == 0"}
)(even_kernel)


@triton.jit
def compat_add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) + tl.load(y + offs, mask=offs < n), mask=offs < n)


# The README's migration path: Triton's decorator swapped for autotune.compat's.
compat_add = autotune_compat.autotune(
    configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128}, num_warps=8)], key=["n"]
)(compat_add_kernel)


def matmul_args(dtype=torch.float16, n=64):
    a = torch.zeros(n, n, dtype=dtype)
    return (a, a, a, n, n, n, *a.stride(), *a.stride(), *a.stride())


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def triton_cache(tmp_path_factory):
    """One Triton compile cache for the module (tests that need their own point TRITON_CACHE_DIR elsewhere)."""
    path = tmp_path_factory.mktemp("triton-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(path))
        yield path


@pytest.fixture(autouse=True)
def _use_module_triton_cache(triton_cache, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))


@pytest.fixture(scope="module")
def matmul_runs(triton_cache):
    """The CPU matmul space precompiled for two targets, twice: (kernel, first report, second report)."""
    kernel = matmul.make_matmul(matmul.CPU_SPACE)
    first = precompile(kernel, *matmul_args(), targets=["cuda:90", "cuda:80"], workers=2)
    second = precompile(kernel, *matmul_args(), targets=["cuda:90", "cuda:80"], workers=2)
    return kernel, first, second


@pytest.fixture(scope="module")
def add_run(triton_cache):
    """The vector add's two configs precompiled for cuda:90 from example arguments."""
    x = torch.zeros(1024)
    return precompile(tuned_add, x, x, x, 1024, targets=["cuda:90"], workers=2)


# ---------------------------------------------------------------------------------------------- precompile


def _cache_metadata(triton_cache: Path, name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in triton_cache.glob(f"*/{name}.json")]


def test_matmul_space_compiles_for_two_targets_into_tritons_cache(matmul_runs, triton_cache):
    kernel, first, _ = matmul_runs
    assert first.failed == []
    assert len(first.compiled) == 2 * len(kernel.configs) == 8
    assert first.fresh == 8 and first.cache_hits == 0
    for target in ("cuda:90", "cuda:80"):
        compiled, failed = first.for_target(target)
        assert sorted(map(str, (c.config for c in compiled))) == sorted(map(str, kernel.configs))
        assert failed == []
    cubins = {p.parent for p in triton_cache.glob("*/_matmul_kernel.cubin")}
    assert {Path(c.path) for c in first.compiled} <= cubins
    archs = sorted(m["target"]["arch"] for m in _cache_metadata(triton_cache, "_matmul_kernel"))
    assert archs.count(90) >= 4 and archs.count(80) >= 4
    assert all(c.n_regs and 0 < c.n_regs <= 255 for c in first.compiled)  # read from the cubin
    assert all(c.shared_bytes is not None for c in first.compiled)
    assert first.wall_s > 0 and first.configs_per_s > 0
    assert "8 compiled (8 now, 0 already in Triton's cache), 0 failed" in first.summary()


def test_second_precompile_is_a_cache_hit(matmul_runs):
    """Every config found in Triton's cache, none compiled again (how much faster: bench_precompile.py)."""
    _, first, second = matmul_runs
    assert second.cache_hits == 8 and second.fresh == 0 and second.failed == []
    assert {c.hash for c in second.compiled} == {c.hash for c in first.compiled}


def test_failing_configs_are_reported_with_their_errors_and_the_rest_compile():
    report = precompile(tuned_transpose, torch.float32, torch.float32, targets=["cuda:80"], workers=2)
    assert [dict(c.config) for c in report.compiled] == [{"BM": 32, "BN": 32, "num_warps": 4}]
    failed = {(f.config["BM"], f.config["BN"]): f for f in report.failed}
    assert set(failed) == {(48, 32), (512, 256), (256, 256)}
    assert failed[48, 32].kind == "compile_error" and "power of 2" in failed[48, 32].error
    assert failed[512, 256].kind == "compile_error" and "tile too large" in failed[512, 256].error
    oor = failed[256, 256]
    assert oor.kind == "out_of_resources"
    assert "262144 bytes of shared memory" in oor.error and "sm_80" in oor.error and "166912" in oor.error
    assert not report.ok and "3 failed" in report.summary()
    assert "out_of_resources" in str(report)


def test_signature_specializes_like_the_example_arguments(add_run):
    assert add_run.fresh + add_run.cache_hits == 2 and add_run.failed == []
    by_signature = precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], workers=0)
    assert by_signature.cache_hits == 2
    assert {c.hash for c in by_signature.compiled} == {c.hash for c in add_run.compiled}
    # n=1000 is not a multiple of 16: another specialization, another binary
    as_string = precompile(tuned_add, signature="x=*fp32, y=*fp32, out=*fp32, n=i32", targets=["cuda:90"], workers=0)
    assert not {c.hash for c in as_string.compiled} & {c.hash for c in add_run.compiled}
    x = torch.zeros(1000)
    from_args = precompile(tuned_add, x, x, x, 1000, targets=["cuda:90"], workers=0)
    assert {c.hash for c in from_args.compiled} == {c.hash for c in as_string.compiled}


def test_a_space_too_large_to_list_is_refused_naming_winners_only():
    huge = autotune_decorator(
        space={"BLOCK": [16, 32, 64, 128], "num_warps": [1, 2, 4, 8, 16, 32], "num_stages": list(range(1, 5001))},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
    )(add_kernel)
    assert huge.configs is None  # 120,000 configs: searched, never listed
    with pytest.raises(PrecompileError, match=r"120,000 configs .* pass winners_only=True"):
        precompile(huge, signature=ADD_SIGNATURE, targets=["cuda:90"], workers=0)


def test_a_kernel_defined_in_a_function_is_refused_once_before_any_compile():
    @triton.jit
    def local_add(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n) + tl.load(y + offs, mask=offs < n), mask=offs < n)

    tuned = autotune_decorator(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)")(local_add)
    with pytest.raises(PrecompileError, match=r"defined inside a function .* compile helper processes import"):
        precompile(tuned, signature=ADD_SIGNATURE, targets=["cuda:90"], workers=0, processes=True)


def test_a_jit_helper_constexpr_the_helpers_cannot_import_is_refused_once_before_any_compile(monkeypatch):
    @triton.jit
    def local_triple(v):
        return v * 3

    monkeypatch.setattr(aot_api, "_run_job", lambda plan, job: pytest.fail("compiled a config"))
    with pytest.raises(
        PrecompileError,
        match=r"local_triple is defined inside a function .* passed as the "
        r"constexpr ACT, and a compile helper process imports @jit functions",
    ):
        precompile(
            tuned_act,
            signature={"x": "*fp32", "out": "*fp32", "n": "i32:16", "ACT": local_triple},
            targets=["cuda:90"],
            workers=0,
            processes=True,
        )


MAIN_SCRIPT = """
import os, sys
os.environ.setdefault("TRITON_INTERPRET", "1")
import triton, triton.language as tl
from autotune import autotune, precompile

@triton.jit
def triple(v):
    return v * 3

@autotune(space={"BLOCK": (64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)")
@triton.jit
def main_kernel(x, out, n, BLOCK: tl.constexpr, ACT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, ACT(tl.load(x + offs, mask=offs < n)), mask=offs < n)

if __name__ == "__main__":
    report = precompile(main_kernel, signature={"x": "*fp32", "out": "*fp32", "n": "i32:16", "ACT": triple},
                        targets=["cuda:90"], workers=0)
    print("compiled", len(report.compiled), [f.error for f in report.failed])
"""


def test_a_jit_helper_defined_in_a_main_script_compiles_as_a_constexpr(tmp_path):
    script = tmp_path / "deploy_script.py"
    script.write_text(MAIN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(
        TRITON_INTERPRET="1",
        AUTOTUNE_CACHE_DIR=str(tmp_path / "cache"),
        TRITON_CACHE_DIR=str(tmp_path / "tc"),
        AUTOTUNE_PROGRESS="0",
        TRITON_DEFAULT_FP_FUSION="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    )
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "compiled 2 []"


def test_hip_target_compiles_and_stand_ins_specialize_like_tensors():
    x = torch.zeros(1024)
    from_args = precompile(tuned_add, x, x, x, 1024, targets="hip:gfx942", workers=2)
    assert from_args.failed == [] and {c.target for c in from_args.compiled} == {"hip:gfx942"}
    from_signature = precompile(tuned_add, signature=ADD_SIGNATURE, targets="hip:gfx942", workers=0)
    assert from_signature.cache_hits == 2  # pointers under 2 GiB: AMD's buffer-ops attribute matches too
    assert {c.hash for c in from_signature.compiled} == {c.hash for c in from_args.compiled}
    assert all(Path(c.path, "add_kernel.hsaco").exists() for c in from_args.compiled)


def test_jit_launch_path_finds_explicit_target_precompile(matmul_runs, triton_cache):
    """What precompile stored for cuda:90 is what Triton's JIT looks up when launching on a cuda:90 GPU.

    Without a GPU: a process without the interpreter, a stub driver reporting cuda:90, and the launch path
    `Autotuned.launch_args` -> `JITFunction.run(..., warmup=True)` (everything but the launch itself).
    Triton's compilation listener reports each lookup; every one must be a cache hit on a precompiled hash.
    """
    _, first, _ = matmul_runs
    expected = sorted(c.hash for c in first.compiled if c.target == "cuda:90")
    script = f"""
import json, sys, torch, triton
sys.path.insert(0, {str(ROOT)!r})
sys.path.insert(0, {str(ROOT / "tests")!r})
import fake_gpu
from kernels import matmul

fake_gpu.activate(90)   # an sm_90 GPU as far as Triton's JIT can tell, up to the launch itself
events = []
triton.knobs.compilation.listener = lambda **kw: events.append((kw["metadata"]["hash"], kw["cache_hit"]))
kernel = matmul.make_matmul(matmul.CPU_SPACE)
a = torch.zeros(64, 64, dtype=torch.float16)
args = (a, a, a, 64, 64, 64, *a.stride(), *a.stride(), *a.stride())
bound = kernel.bind(args, {{}})
for config in kernel.configs:
    launch_args, launch_kwargs, grid = kernel.launch_args(config, bound, None)
    kernel.fn.run(*launch_args, grid=grid, warmup=True, **launch_kwargs)
print(json.dumps(events))
"""
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(triton_cache)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    events = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(events) == 4
    assert all(hit for _, hit in events), f"the JIT compiled instead of loading: {events}"
    assert sorted(h for h, _ in events) == expected


STUB_GPU = """
import json, sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver
from autotune.aot import cubin_resource_usage

class StubUtils:
    def get_device_properties(self, device): return {"max_shared_mem": 163 * 1024}
    def load_binary(self, name, kernel, shared, device):
        return object(), object(), cubin_resource_usage(kernel)["n_regs"], 0, 1024

class StubDriver:  # an sm_80 GPU as far as Triton's JIT and kernel loading can tell
    utils = StubUtils()
    def get_current_device(self): return 0
    def get_current_stream(self, device): return 0
    def get_current_target(self): return GPUTarget("cuda", 80, 32)
    def launcher_cls(self, src, metadata): return lambda *args: None

driver.set_active(StubDriver())
"""


def test_targets_none_compiles_through_the_jit_on_a_stub_gpu(triton_cache):
    """targets=None on CPU, with a stub sm_80 driver: the configs go through the kernel's JIT (AsyncCompileMode),
    Triton's own OutOfResources check at load time fails the big one, and the JIT's in-memory cache then holds
    the compiled config: a launch of it calls triton.compile no more."""
    script = (
        STUB_GPU
        + """
from autotune.aot import precompile
from test_precompile import tuned_transpose as kernel
report = precompile(kernel, torch.float32, torch.float32, targets=None, workers=2)
events = []
triton.knobs.compilation.listener = lambda **kw: events.append(kw["cache_hit"])
x = torch.zeros(32 * 32)
launch_args, launch_kwargs, grid = kernel.launch_args(kernel.configs[0], kernel.bind((x, x), {}), None)
kernel.fn.run(*launch_args, grid=grid, warmup=True, **launch_kwargs)
print(json.dumps({"report": report.to_dict(), "events_after": events}))
"""
    )
    env = {
        **os.environ,
        "TRITON_INTERPRET": "0",
        "TRITON_CACHE_DIR": str(triton_cache),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    report = result["report"]
    assert report["targets"] == ["cuda:80"]
    assert [c["config"] for c in report["compiled"]] == [{"BM": 32, "BN": 32, "num_warps": 4}]
    assert report["compiled"][0]["n_regs"] > 0
    kinds = {(f["config"]["BM"], f["config"]["BN"]): f["kind"] for f in report["failed"]}
    assert kinds == {(48, 32): "compile_error", (512, 256): "compile_error", (256, 256): "out_of_resources"}
    assert result["events_after"] == []


def test_thread_pool_compiles_two_at_once(monkeypatch):
    """Structure only (timings are in bench/): with workers=2 two compiles are in flight at the same time on
    the pool's threads; with workers=0 everything runs on the calling thread."""
    lock = threading.Lock()
    state = {"in_flight": 0, "max": 0, "threads": set()}
    barrier = threading.Barrier(2, timeout=20)

    def fake_run_job(plan, job):
        with lock:
            state["in_flight"] += 1
            state["max"] = max(state["max"], state["in_flight"])
            state["threads"].add(threading.current_thread().name)
        try:
            if threading.current_thread() is not threading.main_thread():
                barrier.wait()  # only passes when a second compile is running at the same time
            time.sleep(0.01)
        finally:
            with lock:
                state["in_flight"] -= 1
        return CompiledConfig(config=job.config, target=str(job.target), cached=False, compile_s=0.01)

    monkeypatch.setattr(aot_api, "_run_job", fake_run_job)
    report = precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90", "cuda:80"], workers=2)
    assert len(report.compiled) == 4 and report.failed == []
    assert state["max"] == 2
    assert len(state["threads"]) == 2 and all(n.startswith("autotune-compile") for n in state["threads"])

    state.update(max=0, threads=set())
    serial = precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], workers=0)
    assert len(serial.compiled) == 2 and state["max"] == 1
    assert state["threads"] == {threading.main_thread().name}


def test_winners_only_compiles_the_cached_winner(monkeypatch):
    compiled = []
    monkeypatch.setattr(
        aot_api,
        "_run_job",
        lambda plan, job: (
            compiled.append(dict(job.config))
            or CompiledConfig(config=job.config, target=str(job.target), cached=True, compile_s=0.0)
        ),
    )
    autotune.clear_autotune_cache(tuned_add)
    with pytest.raises(PrecompileError, match="no cached winner of add_kernel"):
        precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], winners_only=True)
    winner = _tune_add()
    report = precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], winners_only=True)
    assert compiled == [winner]
    assert any("no winner of add_kernel was tuned on cuda:90" in n for n in report.notes)
    compiled.clear()  # with space=: only the winners that space holds (it was ignored)
    other = {"BLOCK": tuple(b for b in (16, 32, 64, 128, 256) if b != winner["BLOCK"])}
    report = precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], winners_only=True, space=other)
    assert compiled == [] and any("left out, not in space=" in n for n in report.notes)


# ---------------------------------------------------------------------------------------------- arguments


def test_bad_calls_fail_before_compiling_with_a_fix():
    with pytest.raises(PrecompileError, match="example arguments .* or signature="):
        precompile(tuned_add, targets=["cuda:90"])
    with pytest.raises(PrecompileError, match="not both"):
        precompile(tuned_add, torch.zeros(4), signature=ADD_SIGNATURE, targets=["cuda:90"])
    with pytest.raises(PrecompileError, match=r"no value for \['n'\]"):
        precompile(tuned_add, signature={"x": "*fp32", "y": "*fp32", "out": "*fp32"}, targets=["cuda:90"])
    with pytest.raises(PrecompileError, match=r"\['m'\], which are not arguments"):
        precompile(tuned_add, signature={**ADD_SIGNATURE, "m": "i32"}, targets=["cuda:90"])
    with pytest.raises(PrecompileError, match="cuda:<compute capability>"):
        precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:nine"])
    with pytest.raises(PrecompileError, match="TRITON_INTERPRET=1"):
        precompile(tuned_add, signature=ADD_SIGNATURE, targets=None)
    with pytest.raises(PrecompileError, match="@autotune-decorated"):
        precompile(add_kernel, signature=ADD_SIGNATURE, targets=["cuda:90"])
    x = torch.zeros(64)
    with pytest.raises(
        PrecompileError,
        match=r"add_kernel: the example arguments give BLOCK by position, which the "
        r"search space sets for each config",
    ):
        precompile(tuned_add, x, x, x, 64, 16, targets=["cuda:90"])  # one too many: BLOCK, not a missing size
    # a constexpr after a tuned field cannot be an example argument: the advice is a whole signature=, which works
    with pytest.raises(PrecompileError, match=r"no value for the constexpr SCALE.*give the whole call as signature="):
        precompile(tuned_scale, x, x, 64, targets=["cuda:90"])


def test_a_space_argument_is_validated_against_the_kernel_like_the_decorators(monkeypatch):
    monkeypatch.setattr(aot_api, "_run_job", lambda plan, job: pytest.fail("compiled a config"))
    with pytest.raises(SpaceError, match=r"space field 'BLOK' is neither .* Did you mean 'BLOCK'\?"):
        precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], space={"BLOK": (64, 128)}, workers=0)
    with pytest.raises(SpaceError, match=r"space field 'num_warp' .* Did you mean 'num_warps'\?"):
        precompile(
            tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], space={"BLOCK": (64,), "num_warp": (4,)}, workers=0
        )
    with pytest.raises(PrecompileError, match=r"no value for the constexpr BLOCK, which neither the search space"):
        precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], space={"num_warps": (4,)}, workers=0)


def test_a_timeout_that_is_not_positive_is_refused(monkeypatch):
    monkeypatch.setattr(aot_api, "_run_job", lambda plan, job: pytest.fail("compiled a config"))
    for timeout in (-1, 0):
        with pytest.raises(PrecompileError, match=rf"timeout_s={timeout} \(--timeout\): give a positive number"):
            precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], timeout_s=timeout, workers=2)


def test_a_kernel_decorated_with_the_compat_autotune_precompiles_its_configs():
    report = precompile(compat_add, signature=ADD_SIGNATURE, targets=["cuda:90"], workers=0)
    assert report.failed == [] and report.kernel == "compat_add_kernel"
    assert sorted((c.config["BLOCK"], c.num_warps) for c in report.compiled) == [(64, 4), (128, 8)]


@pytest.mark.parametrize(
    "kernel, source", [("tuned_even_heuristic", "triton.heuristics"), ("tuned_even_derived", "derive=")]
)
def test_a_value_computed_from_a_size_given_only_by_type_is_noted_and_warned(monkeypatch, kernel, source):
    monkeypatch.setattr(
        aot_api,
        "_run_job",
        lambda plan, job: CompiledConfig(config=job.config, target=str(job.target), cached=True, compile_s=0.0),
    )  # compiles are not the point
    kernel = globals()[kernel]
    typed = {"x": "*fp32", "out": "*fp32", "n": "i32:16"}
    message = (
        rf"signature= gives n only as a type \('i32:16'\), and EVEN \({re.escape(source)}\) is computed from "
        r"its value: compiled with the stand-in n=16 \(EVEN=False\); a launch with n=\d+ needs EVEN=True.*"
        r"Give n the value production launches with \(n=1024 in signature= / --signature\)"
    )
    with pytest.warns(UserWarning, match=message):
        report = precompile(kernel, signature=typed, targets=["cuda:90"], workers=0)
    assert len(report.notes) == 1 and re.search(message, report.notes[0]) and re.search(message, str(report))
    with warnings.catch_warnings(record=True) as caught:  # a literal size: nothing to say
        warnings.simplefilter("always")
        literal = precompile(kernel, signature={**typed, "n": 1024}, targets=["cuda:90"], workers=0)
    assert literal.notes == [] and not [w for w in caught if "only as a type" in str(w.message)]


def test_a_custom_pipeline_hook_refuses_explicit_targets(monkeypatch):
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", lambda: ("custom", "abc"))
    with pytest.raises(PrecompileError, match="add_stages_inspection_hook is set.*targets=None"):
        precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"])


def test_parse_target_and_limits():
    assert str(parse_target("cuda:90")) == "cuda:90" and parse_target("sm_80").arch == 80
    assert parse_target("cuda:sm_90a").arch == 90 and parse_target("cuda:90").warp_size == 32
    assert parse_target("hip:gfx942").warp_size == 64 and parse_target("gfx1100").warp_size == 32
    with pytest.raises(PrecompileError, match="hip:<gfx arch>"):
        parse_target("hip:mi300")
    assert limits_for("cuda:80").shared_bytes == 163 * 1024
    assert limits_for("cuda:90").shared_bytes == 227 * 1024
    assert limits_for("cuda:86").shared_bytes == 99 * 1024
    assert limits_for("cuda:91").shared_bytes == 227 * 1024  # an unknown arch: the closest older one
    assert limits_for("hip:gfx942").shared_bytes == 64 * 1024
    assert over_limits(parse_target("cuda:90"), shared=1024, n_regs=255, num_warps=8, warp_size=32) is None
    message = over_limits(parse_target("cuda:90"), shared=0, n_regs=200, num_warps=16, warp_size=32)
    assert "registers per block" in message and "65536" in message  # 200 regs x 512 threads


def test_parse_signature_entries():
    values = parse_signature("a=*fp16, b=*bf16:1, n=i32:16, m=i64, s=1, f=fp32, flag=u1, none=null")
    assert values["a"].dtype == torch.float16 and values["a"].data_ptr() % 16 == 0
    assert values["b"].data_ptr() % 16 != 0
    assert values["n"] % 16 == 0 and values["m"] > 2**31 and values["m"] % 16
    assert values["s"] == 1 and values["f"] == 1.5 and values["flag"] is True and values["none"] is None
    assert parse_signature('{"x": "*fp32", "BLOCK": 64}')["BLOCK"] == 64
    for bad, message in [
        ("x", "write name=type"),
        ("x=*fp99", "unknown element type"),
        ("x=f16", "unknown type"),
        ("x=constexpr", "give the constexpr's value"),
    ]:
        with pytest.raises(PrecompileError, match=message):
            parse_signature(bad)


def test_cubin_register_count_matches_the_report(add_run):
    cubin = Path(add_run.compiled[0].path, "add_kernel.cubin").read_bytes()
    usage = cubin_resource_usage(cubin)
    assert usage["n_regs"] == add_run.compiled[0].n_regs and usage["frame_bytes"] == 0
    assert cubin_resource_usage(b"not an elf") == {"n_regs": None, "frame_bytes": None}


def test_precompile_is_the_package_attribute():
    assert autotune.precompile is precompile
    assert aot.precompile is precompile
    # No module of the package shares the function's name (the package is autotune.aot).
    assert "precompile" not in {m.name for m in pkgutil.iter_modules(autotune.__path__)}


# ---------------------------------------------------------------------------------------------- archives


def _tune_add(n: int = 1024) -> dict:
    """Tune the vector add afresh (memory and this test's disk cache cleared), so its record is on disk."""
    autotune.clear_autotune_cache(tuned_add)
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    tuned_add(x, x, out, n)
    return dict(tuned_add.best_config)


@pytest.fixture
def exported(tmp_path, monkeypatch):
    """The tuned vector add with its winner compiled for cuda:90 (own Triton cache), exported."""
    triton_dir = tmp_path / "triton-src"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_dir))
    winner = _tune_add()
    report = precompile(tuned_add, signature=ADD_SIGNATURE, targets=["cuda:90"], winners_only=True, workers=0)
    assert [dict(c.config) for c in report.compiled] == [winner]
    archive = tmp_path / "deploy.tar.gz"
    manifest = export_archive(archive, kernels=[tuned_add])
    return archive, manifest, winner


def test_export_writes_records_binaries_and_a_manifest(exported):
    archive, manifest, winner = exported
    assert manifest.kernels == ["kernels_for_tests:add_kernel"] and manifest.targets == ["cuda:90"]  # the object
    assert manifest.triton_version == triton.__version__ and manifest.torch_version == torch.__version__
    assert [r.winner for r in manifest.records] == [winner] and manifest.records[0].device == "interpreter"
    assert len(manifest.binaries) == 1 and "add_kernel.cubin" in manifest.binaries[0].files
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names[0] == "manifest.json"
    assert any(n.startswith("records/add_kernel.") for n in names)  # <name>.<hash of module:qualname>/
    assert any(n.endswith("/add_kernel.cubin") for n in names)


def test_export_says_how_many_entries_it_could_not_read_and_left_out(exported, tmp_path):
    """A cache entry the export cannot read (corrupt, here) is not shipped: the export says so, with the reason,
    rather than write an archive short of it unsaid."""
    from autotune.storage.files import record_path

    corrupt = record_path(tuned_add.record()).with_name("0" * 32 + ".json")
    corrupt.write_text("{ not json")
    with pytest.warns(UserWarning, match=r"left out 1 cache entries that cannot be read \(0{32}\.json: "):
        manifest = export_archive(tmp_path / "again.tar.gz", kernels=[tuned_add])
    assert len(manifest.records) == 1


def test_an_export_the_import_would_refuse_is_refused_naming_what_to_leave_out(exported, tmp_path, monkeypatch):
    """An archive past the import's default caps (here a manifest cap made small) would ship and then fail at every
    import: the export refuses it, saying which cap and how to export less."""
    import autotune.aot.archive as archive_module

    monkeypatch.setattr(archive_module, "MAX_MANIFEST_BYTES", 100)
    with pytest.raises(ArchiveError, match=r"a manifest of [\d,]+ bytes \(import's cap: 100\).*--kernel.*--target"):
        export_archive(tmp_path / "big.tar.gz", kernels=[tuned_add])
    assert not (tmp_path / "big.tar.gz").exists()


def test_export_with_targets_takes_only_those_targets_binaries(exported, tmp_path, capsys):
    """A fleet of one GPU kind ships its binaries alone: `targets=` filters the compiled kernels, and the records to
    those tuned on a device of the targets (the interpreter's winner is left out, and said so)."""
    from autotune.storage.entries import record_json
    from autotune.storage.files import atomic_write, record_path

    precompile(tuned_add, signature=ADD_SIGNATURE, targets=["hip:gfx942"], winners_only=True, workers=0)
    both = export_archive(tmp_path / "both.tar.gz", kernels=[tuned_add])
    assert both.targets == ["cuda:90", "hip:gfx942"] and len(both.records) == 1
    with pytest.warns(UserWarning, match=r"left out 1 tuned winners of other devices than cuda:90 \(1 of 'interp"):
        only = export_archive(tmp_path / "cuda.tar.gz", kernels=[tuned_add], targets=["cuda:90"])
    assert only.targets == ["cuda:90"] and len(only.binaries) == 1 and only.records == []
    h100 = tuned_add.record().replace(device="NVIDIA H100 80GB HBM3 sm90")  # as an H100 would have tuned it
    atomic_write(record_path(h100), record_json(h100))
    with pytest.warns(UserWarning, match="left out 1 tuned winners"):
        only = export_archive(tmp_path / "cuda.tar.gz", kernels=[tuned_add], targets=["cuda:90"])
    assert [r.device for r in only.records] == [h100.device]
    with tarfile.open(tmp_path / "cuda.tar.gz") as tar:
        assert not any(n.endswith(".hsaco") for n in tar.getnames())
    amd = export_archive(tmp_path / "amd.tar.gz", kernels=[tuned_add], targets="gfx942")  # a bare arch: hip
    assert amd.targets == ["hip:gfx942"]
    with pytest.raises(PrecompileError, match="unknown backend"):
        export_archive(tmp_path / "bad.tar.gz", kernels=[tuned_add], targets=["metal:1"])

    from autotune.cli import main

    assert main(["export", str(tmp_path / "cli.tar.gz"), "--kernel", "add_kernel", "--target", "cuda:90"]) == 0
    with tarfile.open(tmp_path / "cli.tar.gz") as tar:
        names = tar.getnames()
    assert any(n.endswith(".cubin") for n in names) and not any(n.endswith(".hsaco") for n in names)
    capsys.readouterr()
    assert main(["export", str(tmp_path / "cli-bad.tar.gz"), "--target", "metal:1"]) == 2
    assert capsys.readouterr().err.startswith("autotune export: target 'metal:1': unknown backend")
    assert not (tmp_path / "cli-bad.tar.gz").exists()
    # a target asked for by name that nothing was compiled for: an error, not an archive without its binaries
    with pytest.raises(
        ArchiveError,
        match=r"no compiled kernels of kernels_for_tests:add_kernel for cuda:80 in .* "
        r"\(found: cuda:90, "
        r"hip:gfx942\); precompile for it first",
    ):
        export_archive(tmp_path / "a80.tar.gz", kernels=[tuned_add], targets=["cuda:80", "cuda:90"])
    assert main(["export", str(tmp_path / "a80.tar.gz"), "--target", "cuda:80"]) == 1
    assert not (tmp_path / "a80.tar.gz").exists()


def test_import_in_a_new_process_loads_the_winner_without_tuning(exported, tmp_path):
    archive, _, winner = exported
    fresh_cache, fresh_triton = tmp_path / "fresh-autotune", tmp_path / "fresh-triton"
    script = """
import json, sys, torch, autotune
from autotune.aot import import_archive
report = import_archive(sys.argv[1])
from test_precompile import tuned_add
x = torch.arange(1024, dtype=torch.float32)
out = torch.empty_like(x)
tuned_add(x, x, out, 1024)
print(json.dumps({"imported": len(report.records_imported), "binaries": len(report.binaries_imported),
                  "stats": autotune.stats()["add_kernel"], "winner": dict(tuned_add.best_config),
                  "correct": bool(torch.equal(out, 2 * x))}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(
        TRITON_INTERPRET="1",
        AUTOTUNE_CACHE_DIR=str(fresh_cache),
        TRITON_CACHE_DIR=str(fresh_triton),
        AUTOTUNE_PROGRESS="0",
        PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")]),
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(archive)], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["imported"] == 1 and result["binaries"] == 1
    assert result["stats"]["disk_hits"] == 1 and result["stats"]["tunings"] == 0
    assert result["winner"] == winner and result["correct"]
    assert list(fresh_triton.glob("*/add_kernel.cubin"))
    group = json.loads(next(fresh_triton.glob("*/__grp__add_kernel.json")).read_text())
    assert all(p.startswith(str(fresh_triton)) and os.path.exists(p) for p in group["child_paths"].values())


def test_import_keeps_a_newer_entry_and_replaces_an_older_one(exported, tmp_path):
    archive, _, _ = exported
    dest, dest_triton = tmp_path / "dest", tmp_path / "dest-triton"
    first = import_archive(archive, cache_dir=dest, triton_cache_dir=dest_triton)
    assert len(first.records_imported) == 1 and len(first.binaries_imported) == 1
    again = import_archive(archive, cache_dir=dest, triton_cache_dir=dest_triton)
    assert again.records_imported == [] and "already present" in again.records_skipped[0][1]
    assert again.binaries_skipped and "already in Triton's cache" in again.binaries_skipped[0][1]

    (entry,) = disk_entries("add_kernel", dest)
    newer = entry.record.replace(timestamp=entry.record.timestamp + 100)
    write_record(newer, dest)
    skipped = import_archive(archive, cache_dir=dest, triton_cache_dir=dest_triton)
    assert skipped.records_imported == [] and "is newer" in skipped.records_skipped[0][1]
    assert load_record(entry.path).timestamp == newer.timestamp

    write_record(entry.record.replace(timestamp=entry.record.timestamp - 100), dest)
    replaced = import_archive(archive, cache_dir=dest, triton_cache_dir=dest_triton)
    assert replaced.records_imported == [str(entry.path)]
    assert load_record(entry.path).timestamp == entry.record.timestamp
    assert replaced.records_replaced == []  # the older entry was for the same source and space

    # An entry of another kernel source keeps its own slot (issue 40 item 12): the import replaces nothing of it
    # and both sources' entries are on disk.
    write_record(entry.record.replace(timestamp=entry.record.timestamp - 100, source_hash="0" * 16), dest)
    other = import_archive(archive, cache_dir=dest, triton_cache_dir=dest_triton)
    assert other.records_replaced == []
    assert sorted(e.record.source_hash for e in disk_entries("add_kernel", dest)) == sorted(
        ["0" * 16, entry.record.source_hash]
    )


def _rewrite_archive(src: Path, dst: Path, edit) -> None:
    with tarfile.open(src) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(dst, "w:gz") as tar:
        for member, data in members:
            data = edit(member.name, data)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


def test_import_refuses_another_triton_version_unless_forced(exported, tmp_path):
    archive, _, _ = exported
    other = tmp_path / "other.tar.gz"

    def older_triton(name, data):
        if name != "manifest.json":
            return data
        manifest = json.loads(data)
        manifest["triton_version"] = "3.0.0"
        return json.dumps(manifest).encode()

    _rewrite_archive(archive, other, older_triton)
    with pytest.raises(ArchiveError, match=r"Triton 3\.0\.0.*force=True \(--force\)"):
        import_archive(other, cache_dir=tmp_path / "d1", triton_cache_dir=tmp_path / "t1")
    assert not (tmp_path / "d1").exists()
    with pytest.warns(UserWarning, match="Triton 3.0.0"):
        report = import_archive(other, force=True, cache_dir=tmp_path / "d1", triton_cache_dir=tmp_path / "t1")
    assert len(report.records_imported) == 1 and report.warnings


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "tampered"])
def test_import_rejects_unsafe_or_corrupt_archives_and_writes_nothing(exported, tmp_path, kind):
    archive, _, _ = exported
    bad = tmp_path / f"{kind}.tar.gz"
    if kind == "tampered":
        _rewrite_archive(archive, bad, lambda name, data: data + b" " if name.endswith(".cubin") else data)
        match = "does not match its checksum"
    else:
        with tarfile.open(archive) as src, tarfile.open(bad, "w:gz") as tar:
            for member in src.getmembers():
                tar.addfile(member, src.extractfile(member))
            evil = tarfile.TarInfo(
                {"dotdot": "records/../../evil.json", "absolute": "/tmp/evil.json", "symlink": "triton/X/link"}[kind]
            )
            if kind == "symlink":
                evil.type, evil.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(evil)
            else:
                evil.size = 2
                tar.addfile(evil, io.BytesIO(b"{}"))
        match = "unsafe archive"
    with pytest.raises(ArchiveError, match=match):
        import_archive(bad, cache_dir=tmp_path / "dest", triton_cache_dir=tmp_path / "dest-triton")
    assert not (tmp_path / "dest").exists() and not (tmp_path / "dest-triton").exists()


def test_export_names_what_is_missing(tmp_path):
    with pytest.raises(ArchiveError, match=r"nothing to export for \['no_such_kernel'\]"):
        export_archive(tmp_path / "a.tar.gz", kernels=["no_such_kernel"])


# ---------------------------------------------------------------------------------------------- CLI


def test_cli_precompile_export_import(add_run, tmp_path, capsys):
    from autotune.cli import main

    code = main(
        [
            "precompile",
            "test_precompile:tuned_add",
            "--target",
            "cuda:90",
            "--signature",
            "x=*fp32,y=*fp32,out=*fp32,n=i32:16",
            "--workers",
            "0",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["cache_hits"] == 2 and report["failed"] == []

    assert main(["precompile", "test_precompile:tuned_add", "--target", "cuda:90"]) == 2
    assert (
        "--signature is required: the types of test_precompile:tuned_add's arguments (x, y, out, n)"
        in capsys.readouterr().err
    )
    # a misspelt kernel is the first thing to fix, before the missing --signature
    assert main(["precompile", "test_precompile:tuned_ad", "--target", "cuda:90"]) == 2
    err = capsys.readouterr().err
    assert "test_precompile has no attribute 'tuned_ad'. Did you mean 'tuned_add'?" in err and "--signature" not in err

    _tune_add()
    archive = tmp_path / "cli.tar.gz"
    assert main(["export", str(archive), "--kernel", "add_kernel"]) == 0
    assert re.search(r"1 records and [1-9]\d* compiled kernels of add_kernel for cuda:90", capsys.readouterr().out)
    assert (
        main(["import", str(archive), "--cache-dir", str(tmp_path / "c"), "--triton-cache-dir", str(tmp_path / "t")])
        == 0
    )
    assert re.search(r"imported 1 records \(0 skipped\) and [1-9]\d* compiled kernels", capsys.readouterr().out)
    assert main(["import", str(tmp_path / "missing.tar.gz")]) == 1
    assert "not a readable .tar.gz" in capsys.readouterr().err
    # a file given as the cache directory: refused before anything is read (as every command with --cache-dir)
    (tmp_path / "file-not-dir").write_text("")
    assert (
        main(
            [
                "import",
                str(archive),
                "--cache-dir",
                str(tmp_path / "file-not-dir"),
                "--triton-cache-dir",
                str(tmp_path / "t"),
            ]
        )
        == 2
    )
    assert "file-not-dir (--cache-dir) is not a directory" in capsys.readouterr().err
    # a record the cache cannot take (its kernel's directory is a file): a FAILED record with the cache's reason,
    # and exit 1 (a deploy script checks it)
    from autotune.storage.entries import kernel_dirname

    (rec,) = [e.record for e in disk_entries("add_kernel", tmp_path / "c")]
    (tmp_path / "blocked").mkdir()
    (tmp_path / "blocked" / kernel_dirname(rec.kernel, rec.kernel_id)).write_text("")
    assert (
        main(
            [
                "import",
                str(archive),
                "--cache-dir",
                str(tmp_path / "blocked"),
                "--triton-cache-dir",
                str(tmp_path / "t"),
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert "imported 0 records (0 skipped)" in captured.out and "NOT installed: 1 records" in captured.out
    assert re.search(r"FAILED record records/.*: cannot lock .*blocked.*\(FileExistsError", captured.out), captured.out
    assert "were not installed" in captured.err


def test_cli_bad_input_is_one_line_naming_the_fix_not_a_traceback(tmp_path, capsys):
    from autotune.cli import main

    signature = "x=*fp32,y=*fp32,out=*fp32,n=i32:16"
    cases = [
        (
            ["precompile", f"{tmp_path / 'nosuch.py'}:add_kernel", "--target", "cuda:90", "--signature", signature],
            2,
            rf"autotune precompile: kernel .*nosuch\.py:add_kernel': there is no file {tmp_path / 'nosuch.py'}",
        ),
        (
            ["precompile", "test_precompile:tuned_add", "--target", "cuda:90", "--signature", signature + ",BLOCK=64"],
            2,
            r"autotune precompile: add_kernel: the signature gives BLOCK, which the search space sets for each "
            r"config: drop BLOCK=64 from the signature \(--signature",
        ),
        (
            [
                "precompile",
                "test_precompile:tuned_scale",
                "--target",
                "cuda:90",
                "--signature",
                "x=*fp32,out=*fp32,n=i32",
            ],
            2,
            r"autotune precompile: scale_kernel: no value for the constexpr SCALE, .* add SCALE=<value> to "
            r"--signature",
        ),
        (
            ["precompile", "test_precompile:add_kernel", "--target", "cuda:90", "--signature", signature],
            2,
            r"autotune precompile: test_precompile:add_kernel is a @triton.jit kernel without a search space \(not "
            r"@autotune-decorated\): name the @autotune-decorated object instead",
        ),
        (
            ["export", str(tmp_path)],
            1,
            rf"autotune export: {tmp_path} is a directory; give the archive's file name, e.g. {tmp_path}/deploy\.tar\.gz",
        ),
    ]
    (tmp_path / "a-file").write_text("")
    cases.append(
        (
            ["export", str(tmp_path / "a-file" / "deploy.tar.gz")],
            1,
            rf"autotune export: cannot write the archive .*: {tmp_path / 'a-file'} is a file, not a directory",
        )
    )
    for argv, code, message in cases:
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert re.match(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing written


# ---------------------------------------------------------------------------------------------- GPU


def _count_compiles():
    events = []
    previous = triton.knobs.compilation.listener

    def listener(**kw):
        events.append(bool(kw["cache_hit"]))
        if previous is not None:
            previous(**kw)

    triton.knobs.compilation.listener = listener
    return events, previous


@pytest.mark.gpu
def test_gpu_precompile_for_the_active_gpu_then_launch_compiles_nothing(tmp_path, monkeypatch):
    """targets=None goes through the kernel's JIT: tuning and the winner's launch find every config compiled."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    jit = triton.JITFunction(add_kernel.fn)  # fresh in-memory caches
    kernel = autotune_decorator(space={"BLOCK": (64, 128, 256, 512)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(jit)
    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    report = precompile(kernel, x, x, out, 4096, targets=None, workers=2)
    assert len(report.compiled) == 4 and report.failed == [] and report.fresh == 4
    assert all(c.n_regs is not None for c in report.compiled)
    device = torch.cuda.current_device()
    in_memory = len(jit.device_caches[device][0])
    events, previous = _count_compiles()
    try:
        kernel(x, x, out, 4096)
        torch.cuda.synchronize()
    finally:
        triton.knobs.compilation.listener = previous
    assert events == [], "the launch path called triton.compile"
    assert len(jit.device_caches[device][0]) == in_memory
    torch.testing.assert_close(out, 2 * x)


@pytest.mark.gpu
def test_gpu_explicit_target_precompile_is_loaded_not_compiled(tmp_path, monkeypatch):
    """An explicit-target precompile for this GPU's arch: tuning here loads every config from Triton's cache."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    major, minor = torch.cuda.get_device_capability()
    jit = triton.JITFunction(add_kernel.fn)
    kernel = autotune_decorator(space={"BLOCK": (64, 128, 256, 512)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(jit)
    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    report = precompile(kernel, x, x, out, 4096, targets=[f"cuda:{major}{minor}"], workers=2)
    assert len(report.compiled) == 4 and report.failed == []
    events, previous = _count_compiles()
    try:
        kernel(x, x, out, 4096)
        torch.cuda.synchronize()
    finally:
        triton.knobs.compilation.listener = previous
    assert len(events) == 4 and all(events), f"cache hits per config: {events}"
    torch.testing.assert_close(out, 2 * x)


# ---------------------------------------------------------------------------------------------- exit status, imports


def test_cli_precompile_exits_1_when_a_config_timed_out_though_another_compiled(tmp_path):
    """A deploy step checks $?: a config past --timeout is a binary missing (exit 1, it was 0 while any config of the
    target compiled). Here ptxas hangs from its second compile on, so one of the two configs times out."""
    from fake_gpu import hanging_ptxas

    fake = hanging_ptxas(tmp_path, f"! mkdir {tmp_path / 'first'} 2>/dev/null")  # the first compile goes through
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(
        TRITON_INTERPRET="1",
        AUTOTUNE_PROGRESS="0",
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
        TRITON_PTXAS_PATH=str(fake),
        TRITON_PTXAS_BLACKWELL_PATH=str(fake),
        PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")]),
    )
    out = subprocess.run(
        [sys.executable, "-m", "autotune", "precompile", "test_precompile:tuned_add", "--target", "cuda:80",
         "--signature", "x=*fp32,y=*fp32,out=*fp32,n=i32:16", "--workers", "1", "--timeout", "5", "--json"],
        env=env, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    report = json.loads(out.stdout)
    assert len(report["compiled"]) == 1 and [f["kind"] for f in report["failed"]] == ["timeout"], out.stderr
    assert out.returncode == 1


def test_precompile_exit_status_is_1_for_timeouts_crashes_and_any_failed_winner():
    """A full space's compile errors and configs over the target's limits are its normal misfits (exit 0); a timeout,
    a crashed helper, or under --winners-only any failure is a binary a deploy expects and lacks (exit 1)."""
    from autotune.aot.report import FailedConfig, PrecompileReport
    from autotune.cli.aot import _precompile_status
    from autotune.space.spaces import Config

    def status(kind: str, *, winners_only: bool) -> int:
        report = PrecompileReport(kernel="k", targets=["cuda:90"])
        report.compiled.append(CompiledConfig(config=Config(BLOCK=64), target="cuda:90", cached=False, compile_s=0.1))
        report.failed.append(FailedConfig(config=Config(BLOCK=128), target="cuda:90", error="e", kind=kind))
        return _precompile_status(report, winners_only=winners_only)

    assert [status(k, winners_only=False) for k in ("compile_error", "out_of_resources")] == [0, 0]
    assert [status(k, winners_only=False) for k in ("timeout", "crashed")] == [1, 1]
    assert [status(k, winners_only=True) for k in ("compile_error", "out_of_resources")] == [1, 1]


@pytest.mark.parametrize(
    ("source", "error"),
    [("x = = 1\n", r"SyntaxError: invalid syntax"), ("raise RuntimeError('boom at import')\n", "RuntimeError: boom")],
)
def test_a_kernel_module_that_fails_to_import_is_one_line_and_left_out_of_sys_modules(tmp_path, capsys, source, error):
    from autotune.cli import main

    path = tmp_path / "broken_kernels_mod.py"
    path.write_text(source)
    argv = ["precompile", f"{path}:k", "--target", "cuda:90", "--signature", "x=*fp32"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.match(rf"autotune precompile: kernel '{re.escape(str(path))}:k': importing {re.escape(str(path))} "
                    rf"failed \({error}.*\); fix the module", err), err  # fmt: skip
    assert "Traceback" not in err and err.count("\n") == 1
    assert "broken_kernels_mod" not in sys.modules  # a half-run module is not found by the next import


def test_a_timeout_is_said_in_precompile_s_own_words():
    """The pipeline's timeout names its compile_timeout_s; precompile's user set timeout_s (--timeout)."""
    from autotune.aot.api import _failure, _Job
    from autotune.aot.targets import parse_target
    from autotune.record import TrialStatus
    from autotune.space.spaces import Config

    job = _Job(Config(BLOCK=64), parse_target("cuda:90"))
    failure = _failure(job, TrialStatus.TIMEOUT, TimeoutError("compiling took longer than compile_timeout_s=3.0"), 3.0)
    assert (failure.kind, failure.error) == ("timeout", "compiling took longer than timeout_s=3 (--timeout)")
