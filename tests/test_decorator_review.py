"""Review fixes of the decorator: chained `triton.heuristics` rules, the grid `autotune_launch` reports, what launches
untuned under prune= (AUTOTUNE_OFFLINE / AUTOTUNE_DISABLE / a capture), AUTOTUNE_FORCE for a winner read in while
capturing, Triton's dtype form of `warmup`, and a bad tuple grid on a memory hit. Real kernels through the
interpreter and a real disk cache."""

from __future__ import annotations

import warnings

import pytest
import torch
import triton
import triton.language as tl

from autotune import CacheWarning, CaptureWarning, Config, ExpressionError, Tuning, autotune, autotune_launch
from autotune.compiled.capture import assume_capturing
from autotune.kernel.pruning import untuned_config

FAST = Tuning(warmup=0, reps=1, compile_workers=0, refine_topk=0, isolate="off")


@triton.heuristics(
    {
        "UNROLL": lambda a: 2 if a["n"] >= 64 else 1,
        "EVEN": lambda a: a["n"] % (a["BLOCK"] * a["UNROLL"]) == 0,  # reads UNROLL, set by the rule before it
    }
)
@triton.jit
def chained_double(x, out, n, BLOCK: tl.constexpr, UNROLL: tl.constexpr, EVEN: tl.constexpr):
    pid = tl.program_id(0)
    for u in tl.static_range(UNROLL):
        offs = (pid * UNROLL + u) * BLOCK + tl.arange(0, BLOCK)
        if EVEN:
            tl.store(out + offs, tl.load(x + offs) * 2)
        else:
            m = offs < n
            tl.store(out + offs, tl.load(x + offs, mask=m) * 2, mask=m)


@triton.heuristics({"UNROLL": lambda a: 2 if a["n"] >= 64 else 1})
@triton.jit
def unrolled_double(x, out, n, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    for u in tl.static_range(UNROLL):
        offs = (pid * UNROLL + u) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) * 2, mask=m)


@triton.jit
def unmasked_inc(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs) + 1)  # no mask: only a BLOCK that divides n is right


@triton.jit
def masked_inc(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + 1, mask=m)


def divides(configs, named):
    return [c for c in configs if named["n"] % c["BLOCK"] == 0]


def unmasked(**options):
    return autotune(space={"BLOCK": (64, 32)}, key=["n"], grid="(n // $BLOCK,)", prune=divides, tuning=FAST, **options)(
        unmasked_inc
    )


def masked():
    return autotune(space={"BLOCK": (16, 32)}, key=["pow2_bucket(n)"], grid="(cdiv(n, $BLOCK),)", tuning=FAST)(
        masked_inc
    )


def test_a_heuristics_rule_reads_an_earlier_rule_of_its_layer():
    """As Triton's Heuristics.run: each rule sees the values of the rules before it (EVEN reads UNROLL)."""
    kernel = autotune(space={"BLOCK": (16, 32)}, key=["n"], grid="(cdiv(n, $BLOCK * UNROLL),)", tuning=FAST)(
        chained_double
    )
    for n in (128, 100):
        x, out = torch.arange(n, dtype=torch.float32), torch.zeros(n)
        for _ in range(2):  # the miss (tuned), then the memory hit (its own grid evaluated again)
            out.zero_()
            kernel(x, out, n)
            assert torch.equal(out, 2 * x)


def test_autotune_launch_reports_the_grid_a_heuristics_kernel_launched():
    """A callable grid reads the triton.heuristics values (UNROLL) as at the launch; the grid reported is that one."""
    x, out = torch.arange(128, dtype=torch.float32), torch.zeros(128)

    def grid(meta):
        return (triton.cdiv(meta["n"], meta["BLOCK"] * meta["UNROLL"]),)

    for _ in range(2):  # tuned, then a memory hit
        out.zero_()
        result = autotune_launch(
            unrolled_double, space={"BLOCK": (16, 32)}, args=(x, out, 128), key=["n"], grid=grid, tuning=FAST
        )
        assert torch.equal(out, 2 * x)
        assert result.grid == (triton.cdiv(128, result.config["BLOCK"] * 2),)


@pytest.mark.parametrize("switch", ["AUTOTUNE_OFFLINE", "AUTOTUNE_DISABLE"])
@pytest.mark.parametrize("fallback", [None, {"BLOCK": 64}, {"BLOCK": 32}])
def test_an_untuned_launch_is_a_config_prune_keeps(monkeypatch, switch, fallback):
    """prune= keeps only BLOCK=32 for n=96: neither the first config nor a fallback= it leaves out launches (they
    would leave 32 elements unwritten); a fallback= it keeps does."""
    monkeypatch.setenv(switch, "1")
    kernel = unmasked(fallback=fallback)
    x, out = torch.arange(96, dtype=torch.float32), torch.zeros(96)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(x, out, 96)
    assert kernel.best_config == Config(BLOCK=32)
    assert torch.equal(out, x + 1)
    if switch == "AUTOTUNE_OFFLINE":  # the warning names the config launched
        assert [str(w.message) for w in caught if w.category is CacheWarning][0].endswith(
            "launching {'BLOCK': 32} untuned"
        )
    assert kernel.cache_info()["tunings"] == 0


def test_an_untuned_launch_keeps_a_fallback_prune_keeps(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DISABLE", "1")
    kernel = unmasked(fallback={"BLOCK": 32})
    x, out = torch.arange(128, dtype=torch.float32), torch.zeros(128)  # prune= keeps both: the fallback launches
    kernel(x, out, 128)
    assert kernel.best_config == Config(BLOCK=32) and torch.equal(out, x + 1)


def test_a_capture_launches_a_config_prune_keeps():
    """A key met while capturing, with nothing tuned: the first config prune= keeps, not a fallback= it leaves out."""
    kernel = unmasked(fallback={"BLOCK": 64})
    x, out = torch.arange(96, dtype=torch.float32), torch.zeros(96)
    with warnings.catch_warnings(record=True) as caught, assume_capturing():
        warnings.simplefilter("always")
        kernel(x, out, 96)
    assert [w for w in caught if w.category is CaptureWarning]
    assert kernel.best_config == Config(BLOCK=32) and torch.equal(out, x + 1)


@pytest.mark.parametrize("switch", ["AUTOTUNE_OFFLINE", "AUTOTUNE_DISABLE"])
def test_an_untuned_launch_keeps_a_fallback_outside_the_space(monkeypatch, switch):
    """A fallback= outside the space (BLOCK=16) is never shown to prune=, so prune= did not reject it: it launches."""
    monkeypatch.setenv(switch, "1")
    kernel = unmasked(fallback={"BLOCK": 16})
    x, out = torch.arange(128, dtype=torch.float32), torch.zeros(128)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)  # AUTOTUNE_OFFLINE's: no cached winner
        kernel(x, out, 128)
    assert kernel.best_config == Config(BLOCK=16) and torch.equal(out, x + 1)


def test_untuned_config_keeps_fallback_only_where_prune_keeps_it():
    a, b = Config(BLOCK=64), Config(BLOCK=32)
    in_space = {a, b}.__contains__
    assert untuned_config(a, [b], "checksum", in_space) == b  # pruned away for this call
    assert untuned_config(a, [b, a], "checksum", in_space) == a
    assert untuned_config(a, [b], None, in_space) == a  # no prune=: fallback= as given
    outside = Config({"BLOCK": 999})
    assert untuned_config(outside, [b], "checksum", in_space) == outside  # prune= never saw it: not rejected
    assert untuned_config(None, [b, a], None, in_space) == b
    assert untuned_config(None, [], None, in_space) is None  # a lazy space: the caller samples one


def test_warmup_with_dtypes_compiles_the_stored_winner():
    """Triton's KernelInterface.warmup form: torch dtypes stand in for tensors; the key's stored winner is used."""
    kernel = masked()
    x, out = torch.arange(128, dtype=torch.float32), torch.zeros(128)
    kernel(x, out, 100)
    winner = kernel.best_config
    kernel.warmup(torch.float32, torch.float32, 100, grid=(1,))
    assert kernel.best_config == winner and kernel.cache_info()["tunings"] == 1


def test_a_float_tuple_grid_on_a_hit_is_the_miss_path_s_error():
    kernel = masked()
    x, out = torch.arange(128, dtype=torch.float32), torch.zeros(128)
    with pytest.raises(ExpressionError, match="grid sizes must be ints") as on_miss:
        kernel[(8.0,)](x, out, 128)
    kernel(x, out, 128)  # tuned: the next call is a memory hit
    with pytest.raises(ExpressionError, match="grid sizes must be ints") as on_hit:
        kernel[(8.0,)](x, out, 128)
    assert str(on_hit.value) == str(on_miss.value)
