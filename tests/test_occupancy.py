"""`occupancy` in a space: its lowering per backend, the checks at decoration, tuning under the interpreter and on
a (stand-in) cuda:90 target, and real compiles for cuda:90 and hip:gfx942 whose registers show the cap.

Real compiles are few: one register-hungry tile precompiled for cuda:90 and for hip:gfx942, in a module fixture
(two distinct compiles each: occupancy=1 needs no cap, so it is the uncapped kernel), and compiled twice through
Triton's JIT on a stand-in sm_90 driver in a process without the interpreter.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import acc_tile_kernel, add_kernel
from msgspec import UNSET

import autotune.compat as autotune_compat
from autotune import FixedSpace, autotune, precompile
from autotune.aot.targets import parse_target
from autotune.errors import CallError, OptionError, SpaceError, classify
from autotune.kernel.occupancy import OccupancyUnreachable, lower
from autotune.record import TrialStatus
from autotune.reporting.lines import emit

HERE = os.path.dirname(__file__)


def _tile_space(rows: int) -> FixedSpace:
    return FixedSpace(
        [
            {"BM": rows, "BN": 128, "num_warps": 4, "occupancy": None},
            {"BM": rows, "BN": 128, "num_warps": 4, "occupancy": 1},
            {"BM": rows, "BN": 128, "num_warps": 4, "occupancy": 4},
            {"BM": rows, "BN": 128, "num_warps": 8, "occupancy": 16},  # 128 warps: more than an SM or CU holds
        ]
    )


TILE_SIGNATURE = {"x": "*fp32", "out": "*fp32", "n": "i32"}
tuned_tile = autotune(space=_tile_space(128), grid=(1,))(acc_tile_kernel)


def _by_occupancy(reports, target):
    compiled, failed = reports[target].for_target(target)
    return {c.config["occupancy"]: c for c in compiled}, failed


@pytest.fixture(scope="module")
def tile_report(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        cuda = precompile(tuned_tile, signature=TILE_SIGNATURE, targets="cuda:90", workers=2)
        # 256 rows on AMD: 64-thread waves hold a 128 x 128 tile in 127 VGPRs, under what occupancy=4 leaves
        hip = precompile(tuned_tile, signature=TILE_SIGNATURE, targets="hip:gfx942", space=_tile_space(256), workers=2)
        return {"cuda:90": cuda, "hip:gfx942": hip}


# ---------------------------------------------------------------------------------------------- lowering


@pytest.mark.parametrize(
    ("occupancy", "num_warps", "target", "expected"),
    [
        (4, 4, "cuda:90", {"maxnreg": 128}),  # 65536 / (4 x 128)
        (3, 4, "cuda:90", {"maxnreg": 168}),  # 170 rounded down to the allocation unit of 8
        (2, 8, "cuda:80", {"maxnreg": 128}),
        (10, 4, "cuda:80", {"maxnreg": 48}),  # 51 rounded down
        (16, 4, "cuda:90", {"maxnreg": 32}),  # a full SM (64 warps): 32 each, over the 24 ptxas allows
        (1, 4, "cuda:90", {"maxnreg": None}),  # 512 per thread: over the 255 maximum, so no cap at all
        (8, 8, "cuda:90", {"maxnreg": 32}),
        (4, 4, "cuda:89", {"maxnreg": 128}),
        (4, 4, "hip:gfx942", {"waves_per_eu": 4}),  # 4 blocks x 4 waves over 4 SIMDs
        (3, 8, "hip:gfx942", {"waves_per_eu": 6}),
        (1, 2, "hip:gfx942", {"waves_per_eu": None}),  # under one wave per SIMD: nothing to ask
        (5, 8, "hip:gfx908", {"waves_per_eu": 10}),
        (2, 8, "hip:gfx1100", {"waves_per_eu": 4}),
        (None, 4, "cuda:90", {}),
    ],
)
def test_occupancy_lowers_to_each_backends_knob(occupancy, num_warps, target, expected):
    assert lower(occupancy, num_warps, parse_target(target)) == expected


def test_the_interpreter_takes_occupancy_and_lowers_it_to_nothing():
    assert lower(4, 4, None) == {}


@pytest.mark.parametrize(
    ("occupancy", "num_warps", "target", "arithmetic"),
    [
        (16, 8, "cuda:90", "16 blocks x 8 warps = 128 warps, sm_90 holds at most 64 warps and 32 blocks per SM"),
        (17, 2, "cuda:86", "17 blocks x 2 warps = 34 warps, sm_86 holds at most 48 warps and 16 blocks per SM"),
        (8, 16, "cuda:90", "8 blocks x 16 warps = 128 warps"),
        (16, 4, "hip:gfx942", "16 x 4 waves / 4 SIMDs = 16 waves per SIMD, gfx942 runs at most 8"),
    ],
)
def test_an_occupancy_out_of_reach_is_out_of_resources_with_the_arithmetic(occupancy, num_warps, target, arithmetic):
    with pytest.raises(OccupancyUnreachable) as caught:
        lower(occupancy, num_warps, parse_target(target))
    assert arithmetic in str(caught.value)
    assert f"occupancy={occupancy} at num_warps={num_warps}" in str(caught.value)
    assert classify(caught.value, "compile").value == "out_of_resources"


# ---------------------------------------------------------------------------------------------- decoration


def _decorate(space, **static):
    return autotune(space=space, key=["n"], grid="(cdiv(n, $BLOCK),)", **static)(add_kernel)


def test_occupancy_is_a_space_field_and_none_means_no_hint():
    kernel = _decorate({"BLOCK": (64,), "occupancy": (None, 1, 2, 4)})
    assert len(kernel.configs) == 4


def test_occupancy_in_the_space_and_as_a_static_hint_is_the_pick_one_error():
    with pytest.raises(OptionError, match="'occupancy' is both a static option and a space field.*pick one"):
        _decorate({"BLOCK": (64,), "occupancy": (1, 2)}, occupancy=2)


@pytest.mark.parametrize(
    ("space", "static", "knob"),
    [
        ([{"BLOCK": 64, "occupancy": 2, "maxnreg": 128}], {}, "maxnreg"),
        ([{"BLOCK": 64, "occupancy": 2}], {"waves_per_eu": 2}, "waves_per_eu"),
        ({"BLOCK": (64,), "maxnreg": (None, 96)}, {"occupancy": 2}, "maxnreg"),
    ],
)
def test_occupancy_with_the_knob_it_lowers_to_is_refused_naming_both(space, static, knob):
    with pytest.raises(SpaceError, match=f"sets both occupancy and {knob}"):
        _decorate(space, **static)


def test_occupancy_none_beside_maxnreg_is_no_conflict():
    kernel = _decorate([{"BLOCK": 64, "occupancy": None, "maxnreg": 128}, {"BLOCK": 64, "occupancy": 2}])
    assert len(kernel.configs) == 2


@triton.jit
def occupancy_param_kernel(out, occupancy: tl.constexpr):
    tl.store(out, occupancy)


def test_a_kernel_parameter_named_occupancy_is_refused_when_a_config_sets_it():
    with pytest.raises(SpaceError, match="a tl.constexpr parameter named occupancy.*rename the kernel's parameter"):
        autotune(space={"occupancy": (1, 2)}, grid=(1,))(occupancy_param_kernel)


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2"])
def test_an_occupancy_that_is_no_positive_int_is_refused(bad):
    with pytest.raises(SpaceError, match="occupancy must be None .no hint. or an int >= 1"):
        _decorate({"BLOCK": (64,), "occupancy": (bad,)})
    with pytest.raises(OptionError, match="static option occupancy="):
        _decorate({"BLOCK": (64,)}, occupancy=bad)


def test_occupancy_passed_at_the_call_says_where_it_belongs():
    kernel = _decorate({"BLOCK": (64,)})
    x = torch.ones(64)
    with pytest.raises(CallError, match="set it in the search space or as @autotune.occupancy=...."):
        kernel(x, x, torch.empty(64), 64, occupancy=2)


# ---------------------------------------------------------------------------------------------- tuning


def test_the_interpreter_tunes_occupancy_and_records_that_it_had_no_effect():
    kernel = _decorate({"BLOCK": (64, 128), "occupancy": (None, 2)})
    x = torch.arange(200, dtype=torch.float32)
    out = torch.empty_like(x)
    kernel(x, x, out, 200)
    torch.testing.assert_close(out, 2 * x)
    record = kernel.record()
    assert {(t.config["occupancy"], repr(t.lowered)) for t in record} == {(None, "UNSET"), (2, "{}")}
    assert all(("lowered" in t) == (t["config"]["occupancy"] == 2) for t in record.to_dict()["trials"])
    text = io.StringIO()
    emit(record, cache_hit=False, level=2, stream=text)
    lines = text.getvalue().splitlines()
    assert sum("occupancy=2) [occupancy: no effect in the interpreter]" in line for line in lines[1:]) == 2
    assert sum(line.endswith("occupancy=None)") for line in lines[1:]) == 2


def test_on_a_cuda_target_occupancy_becomes_maxnreg_and_an_unreachable_one_is_skipped(monkeypatch):
    """The launch path as on an sm_90 GPU (its target stood in for; the interpreter runs what it launches): each
    config launches with the maxnreg its occupancy lowers to, one out of reach is recorded out_of_resources."""
    kernel = _decorate(
        [{"BLOCK": 64, "occupancy": 4}, {"BLOCK": 64, "num_warps": 8, "occupancy": 16}], tuning={"isolate": "off"}
    )  # in this process: a worker would launch on the interpreter, as it is
    monkeypatch.setattr(kernel, "launch_target", lambda: parse_target("cuda:90"))
    x = torch.arange(100, dtype=torch.float32)
    launch = kernel.select_and_launch((x, x, torch.empty_like(x), 100), {}, None, False)
    assert launch.launch_kwargs["maxnreg"] == 128 and "occupancy" not in launch.launch_kwargs
    record = launch.record
    ok, failed = record.trial_for(kernel.configs[0]), record.trial_for(kernel.configs[1])
    assert ok.status is TrialStatus.OK and ok.lowered == {"maxnreg": 128}
    assert failed.status is TrialStatus.OUT_OF_RESOURCES and failed.lowered is UNSET
    assert "16 blocks x 8 warps = 128 warps, sm_90 holds at most 64" in failed.error
    text = io.StringIO()
    emit(record, cache_hit=False, level=1, stream=text)
    assert "occupancy=4) [occupancy -> maxnreg=128] " in text.getvalue()
    assert "BLOCK=64, occupancy=4 [occupancy -> maxnreg=128]" in kernel.report()  # the trial table


def test_a_static_occupancy_hint_is_lowered_for_every_config(monkeypatch):
    kernel = _decorate({"BLOCK": (64,), "num_warps": (4, 8)}, occupancy=4, tuning={"isolate": "off"})
    cuda = parse_target("cuda:90")
    assert [kernel.lowered(c, cuda) for c in kernel.configs] == [{"maxnreg": 128}, {"maxnreg": 64}]
    monkeypatch.setattr(kernel, "launch_target", lambda: cuda)
    x = torch.ones(64)
    launch = kernel.select_and_launch((x, x, torch.empty_like(x), 64), {}, None, False)
    assert launch.launch_kwargs["maxnreg"] in (64, 128) and "occupancy" not in launch.launch_kwargs


def test_the_drop_in_lowers_an_occupancy_in_a_triton_configs_kwargs(monkeypatch):
    kernel = autotune_compat.autotune(
        configs=[triton.Config({"BLOCK": 64, "occupancy": 4}), triton.Config({"BLOCK": 128, "occupancy": 4})],
        key=["n"],
    )(add_kernel)  # the drop-in tunes in this process, as triton.autotune
    monkeypatch.setattr(kernel.tuner, "launch_target", lambda: parse_target("cuda:90"))
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, x, out, 100)
    torch.testing.assert_close(out, 2 * x)
    record = kernel.tuner.record()
    assert [t.lowered for t in record] == [{"maxnreg": 128}, {"maxnreg": 128}]
    warmed: list[dict] = []
    monkeypatch.setattr(kernel.fn, "warmup", lambda *args, **kwargs: warmed.append(kwargs))
    kernel.warmup(x, x, out, 100, grid=(1,))  # Triton's protocol: compiles each config, tunes nothing
    assert [(w["BLOCK"], w["maxnreg"], "occupancy" in w) for w in warmed] == [(64, 128, False), (128, 128, False)]


# ---------------------------------------------------------------------------------------------- real compiles


def test_cuda90_occupancy_caps_the_registers_of_a_hungry_tile(tile_report):
    by_occupancy, failed = _by_occupancy(tile_report, "cuda:90")
    uncapped, one, four = by_occupancy[None], by_occupancy[1], by_occupancy[4]
    assert uncapped.n_regs > 128  # about 168: the tile needs more than occupancy=4 leaves it
    assert four.lowered == {"maxnreg": 128} and four.n_regs <= 128
    assert one.lowered == {"maxnreg": None} and one.n_regs == uncapped.n_regs  # not capped below its needs
    assert one.hash == uncapped.hash  # no cap is the uncapped kernel: compiled once
    [unreachable] = failed
    assert unreachable.kind == "out_of_resources" and "16 blocks x 8 warps = 128 warps" in unreachable.error
    table = str(tile_report["cuda:90"])
    assert "occupancy=4 [occupancy -> maxnreg=128]" in table
    assert "occupancy=1 [occupancy -> no maxnreg needed]" in table
    assert {"maxnreg": 128} in [c["lowered"] for c in tile_report["cuda:90"].to_dict()["compiled"]]


def test_hip_gfx942_occupancy_sets_waves_per_eu_and_caps_the_vgprs(tile_report):
    by_occupancy, failed = _by_occupancy(tile_report, "hip:gfx942")
    uncapped, one, four = by_occupancy[None], by_occupancy[1], by_occupancy[4]
    assert uncapped.n_regs > 128  # VGPRs (256), read from the AMDGCN's metadata
    assert four.lowered == {"waves_per_eu": 4} and four.n_regs <= 128  # 4 waves per SIMD: 512 / 4 VGPRs each
    assert one.lowered == {"waves_per_eu": None} and one.hash == uncapped.hash
    assert [f.kind for f in failed] == ["out_of_resources"]
    assert "16 x 8 waves / 4 SIMDs = 32 waves per SIMD, gfx942 runs at most 8" in failed[0].error


def test_the_jit_compile_path_lowers_for_the_active_gpu():
    """Tuning's compile step on a GPU (Triton's JIT, a stand-in sm_90 driver, a process without the interpreter):
    the config compiles capped at what its occupancy became, and one out of reach fails out of resources."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = os.path.join(os.environ["AUTOTUNE_CACHE_DIR"], "triton")
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = os.path.dirname(HERE)  # this checkout's autotune, whatever is installed
    script = os.path.join(HERE, "occupancy_jit_script.py")
    proc = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["compiler"] == "JitCompiler" and "cuda" in out["target"]
    rows = {occupancy: (status, lowered, regs, error) for occupancy, status, lowered, regs, error in out["rows"]}
    assert rows[None][0] == "ok" and rows[None][2] > 128
    assert rows[4][:2] == ("ok", {"maxnreg": 128}) and rows[4][2] <= 128
    assert rows[16][0] == "out_of_resources" and "16 blocks x 8 warps = 128 warps" in rows[16][3]
