"""Tuning's checks that a review found missing: a preset's refinement emptied by refine_reps=0, compile_workers
without an upper bound, and a seed of any size (which every strategy takes)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from kernels_for_tests import add_kernel, count_trials

from autotune import Tuning, autotune
from autotune.errors import OptionError

GRID = "(cdiv(n, $BLOCK),)"
SPACE = {"BLOCK": (16, 32, 64, 128)}
QUICK = {"warmup": 0, "reps": 1, "isolate": "off", "force": True}


def _tune(**tuning):
    """Tune add_kernel on one call with `tuning` (over QUICK); the kernel and the configs it tried."""
    tuned = autotune(space=SPACE, key=["n"], grid=GRID, tuning={**QUICK, **tuning})(add_kernel)
    tried = count_trials(tuned)
    x = torch.arange(40, dtype=torch.float32)
    out = torch.empty_like(x)
    tuned(x, x, out, 40)
    assert torch.equal(out, 2 * x)
    return tuned, tried


@pytest.mark.parametrize(("preset", "topk"), [("thorough", 5), ("default", 3)])
def test_refine_reps_0_under_a_preset_that_refines_is_refused_naming_both_fields_and_the_fix(preset, topk):
    """Tuning(preset="thorough", refine_reps=0) dropped the preset's refine_topk=5 re-measurement without a word."""
    expected = (
        rf"the {preset} preset's refine_topk={topk} asks to re-measure the best {topk} configs, but refine_reps=0 "
        r"re-measures none; give refine_reps >= 1 \(e\.g\. refine_reps=10\), or also refine_topk=0 for no "
        r"re-measurement"
    )
    with pytest.raises(OptionError, match=expected):
        Tuning(preset=preset, refine_reps=0)
    with pytest.raises(OptionError, match=expected):  # decorating with it: refused before any call
        autotune(space=SPACE, key=["n"], grid=GRID, tuning={"preset": preset, "refine_reps": 0})(add_kernel)
    with pytest.raises(OptionError, match=expected):  # switching preset onto an explicit refine_reps=0
        Tuning(preset="fast", refine_reps=0).replace(preset=preset)


def test_no_re_measurement_spelt_out_or_the_fast_preset_still_works_and_survives_copies():
    assert (Tuning(preset="fast").refine_topk, Tuning(preset="fast").refine_reps) == (0, 0)
    assert Tuning(preset="fast", refine_reps=0).refine_topk == 0
    asked = Tuning(preset="thorough", refine_topk=0, refine_reps=0)
    for copied in (pickle.loads(pickle.dumps(asked)), copy.deepcopy(asked), asked.replace(preset="default")):
        assert (copied.refine_topk, copied.refine_reps) == (0, 0)
        assert copied.explicit_fields() == {"refine_topk", "refine_reps"}
    # only refine_reps given: a copy refilling refine_topk from a refining preset is refused, not silently empty
    with pytest.raises(OptionError, match=r"the default preset's refine_topk=3 asks"):
        Tuning(preset="fast", refine_reps=0).replace(preset="default")


def test_no_re_measurement_asked_for_tunes_on_first_passes_alone():
    tuned, tried = _tune(preset="thorough", refine_topk=0, refine_reps=0, compile_workers=0)
    record = tuned.record()
    assert set(tried) == {t.config for t in record.trials} and len(record.trials) == len(SPACE["BLOCK"])
    assert not record.remeasured and all(len(t.samples_ms) == 1 for t in record.trials)  # first passes decided


@pytest.mark.parametrize("workers", [257, 10**9])
def test_compile_workers_above_the_bound_is_refused_naming_the_limit_and_the_fix(workers):
    """compile_workers had no upper bound: 10**9 started a compile thread, or under isolation a worker process (a
    Python with torch and copies of the arguments), for every config in flight."""
    expected = (
        rf"compile_workers: Expected `int` <= 256 \(got {workers}\); the most is 256 \(a compile thread each, or "
        r"under isolation a worker process each\): give at most 256, or leave compile_workers unset for min\(8, CPUs\)"
    )
    with pytest.raises(OptionError, match=expected):
        Tuning(compile_workers=workers)
    with pytest.raises(OptionError, match=expected):
        Tuning(preset="fast").replace(compile_workers=workers)
    with pytest.raises(OptionError, match=expected):
        autotune(space=SPACE, key=["n"], grid=GRID, tuning={"compile_workers": workers})(add_kernel)


def test_compile_workers_at_the_bound_tunes():
    tuned, tried = _tune(compile_workers=256)
    record = tuned.record()
    assert len(set(tried)) == len(SPACE["BLOCK"]) and record.winner in tried


@pytest.mark.parametrize("strategy", ["random", "model", "local"])
def test_a_seed_of_any_size_is_taken_by_every_strategy(strategy):
    """Decided, not bounded: every seed goes to Python's random.Random (the model search gives optuna 31-bit seeds
    drawn from it), which takes any int; a 64-bit hash as a seed must keep working."""
    pytest.importorskip("optuna") if strategy == "model" else None
    for seed in (2**80, -(2**63)):
        tuned, tried = _tune(seed=seed, strategy=strategy, max_configs=3, compile_workers=0)
        record = tuned.record()
        assert (record.strategy, len(set(tried))) == (strategy, 3) and record.winner in tried


@pytest.mark.parametrize("workers", [-1, 257])
def test_precompile_workers_outside_0_to_256_are_refused_before_anything_compiles(workers, tmp_path, monkeypatch):
    """precompile(workers=) had only a lower bound: 10**9 started a compile thread (or a helper process) per config."""
    from autotune import PrecompileError, precompile

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    tuned = autotune(space=SPACE, key=["n"], grid=GRID)(add_kernel)
    x = torch.ones(8)
    with pytest.raises(PrecompileError, match=rf"workers={workers}: use 0 \(serial\) to 256"):
        precompile(tuned, x, x, x, 8, targets=["cuda:90"], workers=workers)
    assert list(tmp_path.iterdir()) == []  # refused before any compile
