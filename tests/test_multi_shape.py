"""Multi-shape tuning (`Tuning(objective="geomean" | "max")`): one config for a set of calls, measured on each,
through `autotune.warmup` in process and `autotune.sweep` on a worker. The kernel (tests/sweep_kernels.py) writes
its tag, and its do_bench= reports a fixed time per (tag, call size): each shape's winner differs from the
objective's, so a pick by one shape, or by the arithmetic mean, fails these tests."""

from __future__ import annotations

import json

import pytest
import sweep_kernels as sk
import torch
import triton
import triton.language as tl

import autotune
from autotune import AutotuneError, Config, OptionError, Tuning
from autotune.engine.multi_call import combine
from autotune.storage.files import disk_entries


def _launch(kernel, n: int) -> Config:
    (out, size), _ = sk.shape_call(n)
    kernel(out, size)
    assert int(out[0]) == kernel.best_config["TAG"]  # the launch ran the config it reports
    return kernel.best_config


def test_geomean_picks_the_best_geometric_mean_where_each_shape_would_pick_another():
    kernel = sk.shape_tagged("geomean")
    report = autotune.warmup(kernel, sk.shape_calls([1, 2]))
    assert len(report.tuned) == 1 and not report.cached
    record = kernel.record(())
    assert record.winner == Config(TAG=3)  # geomean 3.0; n=1 alone picks TAG 1, the mean TAG 2
    assert record.objective == "geomean" and record.calls == ["out[1], n=1", "out[1], n=2"]
    by_tag = {t.config["TAG"]: t for t in record.trials}
    for tag, trial in by_tag.items():  # the per-shape times, in the order of `calls`
        assert trial.calls_ms == [sk.SHAPE_TIMES[(tag, 1)], sk.SHAPE_TIMES[(tag, 2)]]
        assert trial.median_ms == pytest.approx(combine("geomean", trial.calls_ms))
    assert _launch(kernel, 1) == Config(TAG=3) and _launch(kernel, 7) == Config(TAG=3)  # one entry serves any shape


def test_max_picks_the_best_worst_case():
    kernel = sk.shape_tagged("max")
    autotune.warmup(kernel, sk.shape_calls([1, 2]))
    record = kernel.record(())
    assert record.winner == Config(TAG=2)  # worst case 5.0, against 16 and 9: no single shape's winner
    assert {t.config["TAG"]: t.median_ms for t in record.trials} == {1: 16.0, 2: 5.0, 3: 9.0}
    assert record.objective == "max"


def test_autotune_print_shows_each_calls_time(monkeypatch, capsys):
    monkeypatch.setenv("AUTOTUNE_PRINT", "2")
    autotune.warmup(sk.shape_tagged("max"), sk.shape_calls([1, 2]))
    summary, *trials = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autotune:")]
    assert "| max of 2 calls: 4.000 ms (out[1], n=1); 5.000 ms (out[1], n=2) |" in summary  # the winner, TAG 2
    by_tag = {line.split("TAG=")[1][0]: line for line in trials}
    assert "calls 1.000 / 16.00 ms" in by_tag["1"] and "calls 9.000 / 1.000 ms" in by_tag["3"]


def test_an_entry_serves_only_the_objective_it_was_tuned_for():
    autotune.warmup(sk.shape_tagged("geomean"), sk.shape_calls([1, 2]))
    (entry,) = disk_entries("shape_tag")
    assert entry.record.objective == "geomean"

    per_call = sk.shape_tagged(None)  # the same kernel, tuned per call: the geomean entry is not its winner
    assert _launch(per_call, 2) == Config(TAG=3)  # n=2's own winner, tuned now on this call alone
    assert _launch(per_call, 1) == Config(TAG=3)  # key=None: that one entry for every call, as triton.autotune
    by_objective = {e.record.objective or None: e for e in disk_entries("shape_tag")}
    assert set(by_objective) == {"geomean", None}  # each objective keeps its own entry (slot) of the key
    stored = json.loads(by_objective[None].path.read_text())
    assert "objective" not in stored and "calls" not in stored  # written as before the field existed
    assert all("calls_ms" not in t for t in stored["trials"])

    assert _launch(sk.shape_tagged("geomean"), 1) == Config(TAG=3)  # its own entry, never the per-call one
    max_kernel = sk.shape_tagged("max")  # neither entry is served to another objective
    with pytest.raises(AutotuneError, match=r"autotune\.sweep\(shape_tag, calls\) or autotune\.warmup") as refused:
        _launch(max_kernel, 1)
    assert "it was tuned for each call (no objective)" in str(refused.value)  # why the stored entries were not used
    assert "objective='geomean'" in str(refused.value)


def test_an_objective_kernel_is_never_tuned_on_one_call_and_tuning_must_keep_its_objective():
    kernel = sk.shape_tagged("geomean")
    with pytest.raises(AutotuneError, match=r"no usable entry for key=\(\)"):
        _launch(kernel, 1)
    with pytest.raises(OptionError, match="objective='max'.*decorated with objective='geomean'"):
        autotune.warmup(kernel, sk.shape_calls([1]), tuning=Tuning(objective="max"))
    with pytest.raises(OptionError, match="objective='geomean'"):
        autotune.sweep(sk.sweep_add, sk.calls([32]), tuning=Tuning(objective="geomean"))
    with pytest.raises(OptionError, match="objective"):
        Tuning(objective="mean")
    autotune.warmup(kernel, sk.shape_calls([1, 2]), tuning=sk.TUNING.replace(objective="geomean", reps=3))
    assert _launch(kernel, 2) == Config(TAG=3)  # the warm-up's copy left its winner with the kernel


def test_calls_of_several_keys_are_tuned_per_key_by_warmup_and_refused_by_one_tuning():
    bucketed = sk.shape_tagged("geomean", key=["n"])
    report = autotune.warmup(bucketed, sk.shape_calls([1, 2, 2]))
    assert sorted(k.key for k in report.tuned) == [(1,), (2,)]
    assert bucketed.record((2,)).calls == ["out[1], n=2", "out[1], n=2"]
    bound = [bucketed.bind(*sk.shape_call(n)) for n in (1, 2)]
    with pytest.raises(autotune.CallError, match="fall in 2 keys"):
        bucketed.tune_calls([(b, None) for b in bound])


def test_a_sweep_with_an_objective_tunes_every_call_into_one_entry():
    report = autotune.sweep(sk.sweep_shapes, sk.shape_calls([1, 2]), workers=1)
    assert [(k.status, k.winner) for k in report.keys] == [("tuned", {"TAG": 3})]
    (entry,) = disk_entries("sweep_shapes")
    assert entry.record.objective == "geomean" and len(entry.record.calls) == 2
    assert {t.config["TAG"]: t.calls_ms for t in entry.record.trials}[1] == [1.0, 16.0]
    out = torch.zeros(1, dtype=torch.int32)
    sk.sweep_shapes(out, 5)  # served from the sweep's entry: a hit, no tuning
    assert int(out[0]) == 3
    again = autotune.sweep(sk.sweep_shapes, sk.shape_calls([1, 2]), workers=1)
    assert [k.status for k in again.keys] == ["cached"]


def test_a_sweep_with_an_objective_tunes_one_entry_per_key_of_its_calls():
    report = autotune.sweep(sk.sweep_shapes_by_n, sk.shape_calls([1, 2, 2]), workers=1)
    assert {tuple(k.key or ()): (k.status, k.winner) for k in report.keys} == {
        (1,): ("tuned", {"TAG": 1}),  # n=1 alone: TAG 1 (1 ms)
        (2,): ("tuned", {"TAG": 3}),  # the two n=2 calls: TAG 3 (1 ms)
    }
    records = {tuple(e.record.key): e.record for e in disk_entries("sweep_shapes_by_n")}
    assert records[(2,)].calls == ["out[1], n=2", "out[1], n=2"] and records[(1,)].calls == ["out[1], n=1"]


def test_a_sweep_with_an_objective_and_a_failing_maker_tunes_nothing():
    """The failed call's key (its set) is unknown: tuning the others would file a partial set's winner."""
    calls = sk.shape_calls([1, 2]) + [sk.failing_maker]
    with pytest.raises(autotune.CallError, match=r"call 2 of the set could not be built.*no such shape.*nothing"):
        autotune.sweep(sk.sweep_shapes, calls, workers=1)
    assert disk_entries("sweep_shapes") == []


def test_an_objective_entry_is_tuned_again_for_another_set_of_calls():
    first = autotune.sweep(sk.sweep_shapes, sk.shape_calls([1]), workers=1)
    assert [(k.status, k.winner) for k in first.keys] == [("tuned", {"TAG": 1})]
    grown = autotune.sweep(sk.sweep_shapes, sk.shape_calls([1, 2]), workers=1)  # n=2 added to the set
    assert [(k.status, k.winner) for k in grown.keys] == [("tuned", {"TAG": 3})]
    (entry,) = disk_entries("sweep_shapes")
    assert entry.record.calls == ["out[1], n=1", "out[1], n=2"]
    reordered = autotune.sweep(sk.sweep_shapes, sk.shape_calls([2, 1]), workers=1)  # the same set
    assert [k.status for k in reordered.keys] == ["cached"]
    kernel = sk.shape_tagged("geomean")  # warmup in process: the same rule
    assert [k.key for k in autotune.warmup(kernel, sk.shape_calls([1, 2])).tuned] == [()]
    assert [k.key for k in autotune.warmup(kernel, sk.shape_calls([2, 1])).cached] == [()]
    assert [k.key for k in autotune.warmup(kernel, sk.shape_calls([2])).tuned] == [()]
    assert kernel.record(()).calls == ["out[1], n=2"]


def test_an_isolated_sweep_measures_each_keys_calls_in_the_trial_worker():
    tuning = sk.ISOLATED.replace(objective="max")
    report = autotune.sweep(sk.sweep_shapes_by_n, sk.shape_calls([1, 2]), workers=1, tuning=tuning)
    assert sorted((tuple(k.key or ()), k.status) for k in report.keys) == [((1,), "tuned"), ((2,), "tuned")]
    for entry in disk_entries("sweep_shapes_by_n"):
        assert entry.record.where == "worker process" and len(entry.record.winner_trial.calls_ms) == 1


@triton.jit
def bounded_tag(out, N: tl.constexpr, TAG: tl.constexpr):
    tl.static_assert(TAG <= N)
    tl.store(out, TAG)


def test_a_config_that_fails_on_one_call_cannot_serve_the_set():
    kernel = autotune.autotune(
        space={"TAG": (1, 2, 3)},
        key=None,
        grid="(1,)",
        tuning=sk.TUNING.replace(objective="max"),
    )(bounded_tag)

    def call(n):
        return lambda: ((torch.zeros(1, dtype=torch.int32),), {"N": n})

    autotune.warmup(kernel, [call(3), call(1)])
    record = kernel.record(())
    assert record.winner == Config(TAG=1)  # TAG 2 and 3 run with N=3 but not with N=1
    failed = [t for t in record.trials if not t.ok]
    assert [t.config["TAG"] for t in failed] == [2, 3]
    assert all(t.error.startswith("on call 1: ") and not t.calls_ms for t in failed)


def test_an_infinite_key_value_is_refused_before_a_set_of_calls_is_tuned_as_before_one_call():
    import math

    from autotune.errors import KeyValueError

    kernel = sk.shape_tagged("geomean", key=["n"])
    with pytest.raises(KeyValueError, match=r"key value inf is infinite"):
        autotune.warmup(kernel, [lambda: ((torch.zeros(1, dtype=torch.int32), math.inf), {})])
    assert kernel.cache_info()["tunings"] == 0 and not disk_entries(kernel)


def test_a_set_of_calls_trial_combines_its_samples_rank_by_rank_so_they_agree_with_its_median_and_min():
    from autotune.engine.multi_call import MultiCallRunner
    from autotune.record import Trial, TrialStatus

    class Scripted:
        def __init__(self, samples):
            self.samples = samples

        def measure(self, config):
            ordered = sorted(self.samples)
            return Trial(
                config=config, status=TrialStatus.OK, median_ms=ordered[1], min_ms=ordered[0], samples_ms=self.samples
            )

    trial = MultiCallRunner([Scripted([1.0, 3.0, 2.0]), Scripted([3.0, 2.0, 1.0])], "max").measure(Config(TAG=1))
    assert trial.median_ms == 2.0 and trial.min_ms == 1.0
    assert sorted(trial.samples_ms) == [1.0, 2.0, 3.0]  # by index it was [3, 3, 2]: median 3, min 2


def test_geomean_of_a_set_with_a_call_too_quick_to_time_is_decided_by_the_other_calls():
    """Every config measures 0 ms on n=1 (below the timer's resolution): the geometric mean still ranks the
    configs by n=2 (TAG 3 fastest there), instead of scoring every config 0 and falling back to space order."""
    n2_ms = {1: 16.0, 2: 5.0, 3: 1.0}

    def times(fn) -> list[float]:
        fn()
        tag, n = int(sk._LAST_CALL["out"][0]), int(sk._LAST_CALL["n"])
        return [0.0 if n == 1 else n2_ms[tag]] * 2

    kernel = autotune.autotune(
        space={"TAG": (1, 2, 3)},
        grid="(1,)",
        setup=sk._remember_call,
        do_bench=times,
        tuning=sk.TUNING.replace(objective="geomean"),
    )(sk.shape_tag)
    autotune.warmup(kernel, sk.shape_calls([1, 2]))
    record = kernel.record(())
    assert record.winner == Config(TAG=3)
    assert {t.config["TAG"]: t.calls_ms for t in record.trials}[3] == [0.0, 1.0]
