"""Transfer across device kinds (issue 43): another device kind's record of the same kernel and key as the model
search's prior. Through the replay (a landscape standing in for the other device's record, and constructed wrong
priors: the ranking reversed, the times permuted) and through the cache tiers (records filed under two device kinds
with AUTOTUNE_DEVICE_KIND)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from autotune import CartesianSpace, Config, Tuning, autotune
from autotune.engine.search import Prior, make_strategy, nearest_prior, prior_from_record
from autotune.record import PriorNote, TuningRecord
from autotune.reporting.lines import format_summary
from autotune.reporting.replay import landscape_prior, load_landscape, replay, replay_once

pytest.importorskip("optuna")

REPO = Path(__file__).resolve().parents[1]
LANDSCAPE = Path(__file__).parent / "data" / "pnpoly_small.json"


@pytest.fixture(scope="module")
def landscape():
    return load_landscape(LANDSCAPE)


def apart(a: Config, b: Config) -> int:
    return sum(1 for k in a if a[k] != b[k])


def distinct_best(ranked, count: int) -> list[Config]:
    """The first `count` configs of `ranked` each at least two fields from the ones before (the prior's seeds)."""
    chosen: list[Config] = []
    for config in ranked:
        if len(chosen) < count and all(apart(config, c) >= 2 for c in chosen):
            chosen.append(config)
    return chosen


def test_a_prior_ranks_what_ran_fastest_first_and_leaves_out_failures():
    a, b, c = Config(X=1), Config(X=2), Config(X=3)
    prior = Prior.from_times([(a, 3.0), (b, None), (c, 1.0), (a, 0.5)], device="GPU A", source="test")
    assert prior.configs_ranked == (c, a) and prior.times_ms == (1.0, 3.0)
    assert prior.rank_of(c) == 1 and prior.rank_of(a) == 2 and prior.rank_of(b) is None
    assert (prior.device, prior.source, len(prior)) == ("GPU A", "test", 2)


@pytest.mark.parametrize("others_ms", [1e-3, 1e6])
def test_the_model_search_probes_the_prior_s_best_distinct_configs_first_and_tells_tpe_only_the_bad_ones(
    landscape, others_ms
):
    """The prior's first 2 seeds come first (after the warm start). Once 4 of the search's own configs have
    measured, its other 6 come next when one of the first 2 beat their median (own configs at 1e6 ms), and never
    when neither did (1e-3 ms: a wrong prior costs 2 configs). TPE hears of the seeds only once 8 of the search's own
    configs have measured, and then only of those slower than the best quarter of its own: all of them when its own
    are faster, none when its own are slower."""
    space = landscape.space()
    prior = landscape_prior(landscape)
    warm = Config(prior.configs_ranked[-1])  # a warm-start seed (this device's other key) still comes first
    strategy = make_strategy("model", space, seed=0, seeds=[warm], budget=80, prior=prior)
    expected = distinct_best(prior.configs_ranked, 8)
    assert expected[0] == prior.configs_ranked[0]
    first = strategy.ask(3)
    assert first == [warm, *expected[:2]]
    for config in first:
        strategy.tell(config, landscape.time_of(config))
    own = strategy.ask(3)
    assert not set(own) & set(expected)
    for config in own:
        strategy.tell(config, others_ms)

    def told():
        return {strategy._config_of(t.params) for t in strategy._study.trials}  # TPE chooses indices

    assert warm in told() and not told() & set(expected)
    later = strategy.ask(6)
    if others_ms > 1:
        assert later == expected[2:]
    else:
        assert not set(later) & set(expected)
    for config in later:
        strategy.tell(config, landscape.time_of(config) if config in expected else others_ms)
    for config in strategy.ask(8):
        strategy.tell(config, others_ms)
    probed = {c for c in expected[:2] if landscape.time_of(c) is not None}
    assert told() & set(expected) == (set() if others_ms > 1 else probed)
    assert not set(expected[2:]) & strategy.tried if others_ms < 1 else set(expected) <= strategy.tried


def test_a_replay_with_a_right_prior_finds_the_best_and_reports_the_winner_s_rank(landscape):
    prior = landscape_prior(landscape)  # the same device's ranking: the best is the prior's first config
    run = replay_once(landscape, "model", budget=12, seed=0, workers=4, prior=prior)
    # measured with the recorded noise, the best and the configs within 1% of it are a toss-up
    assert run["ratio"] <= 1.01 and run["prior_rank"] == prior.rank_of(Config(run["chosen"])) <= 3


def wrong_priors(landscape) -> dict[str, Prior]:
    prior = landscape_prior(landscape)
    shuffled = list(prior.configs_ranked)
    random.Random(0).shuffle(shuffled)
    return {
        "reversed": Prior(prior.configs_ranked[::-1], prior.times_ms, "reversed", "test"),
        "permuted": Prior(tuple(shuffled), prior.times_ms, "permuted", "test"),
    }


@pytest.mark.parametrize("kind", ["reversed", "permuted"])
def test_a_wrong_prior_costs_only_its_seeds(landscape, kind):
    """A wrong prior's seeds measure as what they are and the search goes on without them: its runs end no
    worse than the no-prior runs' worst (a few seeds of the small landscape; the 20-seed tables are in
    bench/README.md)."""
    prior = wrong_priors(landscape)[kind]
    without = [replay_once(landscape, "model", budget=14, seed=s, workers=4)["ratio"] for s in range(4)]
    wrong = [replay_once(landscape, "model", budget=14, seed=s, workers=4, prior=prior)["ratio"] for s in range(4)]
    assert max(wrong) <= max(without)


def test_replay_json_with_a_prior_adds_it_and_keeps_every_field(tmp_path, landscape):
    out = tmp_path / "replay.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    args = [sys.executable, "-m", "autotune", "replay", str(LANDSCAPE), "--budget", "10", "--seeds", "2"]
    res = subprocess.run(
        [*args, "--strategy", "model", "--prior", str(LANDSCAPE), "--json", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "PRIOR_RANK" in res.stdout and f"prior {LANDSCAPE}" in res.stdout
    doc = json.loads(out.read_text())
    assert set(doc) == {"landscape", "strategy", "budget", "workers", "runs", "median_ratio", "worst_ratio", "prior"}
    assert doc["prior"] == {"path": str(LANDSCAPE), "device": "NVIDIA GeForce RTX 3090"}
    prior = landscape_prior(landscape)
    for run in doc["runs"]:
        assert set(run) == {"seed", "chosen", "chosen_ms", "ratio", "evaluations", "tuning_s", "prior_rank"}
        assert run["prior_rank"] == prior.rank_of(Config(run["chosen"]))
    refused = subprocess.run(
        [*args, "--strategy", "random", "--prior", str(LANDSCAPE)], capture_output=True, text=True, env=env
    )
    assert refused.returncode == 2 and "--prior is used by --strategy model only" in refused.stderr
    plain = replay(landscape, "random", budget=5, seeds=1)
    assert "prior" not in plain and "prior_rank" not in plain["runs"][0]


# ---------------------------------------------------------------------------------------------- through the cache


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


SPACE = CartesianSpace(BLOCK=[16, 32, 64, 128], A=range(10), B=range(10), C=[0])


def tune_on(device: str, monkeypatch, n: int = 1000, **tuning) -> TuningRecord:
    """A fresh decoration (empty memory tier, the shared disk tier) tuned for `n` with the device named `device`."""
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", device)
    kernel = autotune(
        space=SPACE,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(compile_workers=0, warmup=0, reps=2, refine_topk=0, strategy="model", max_configs=8, **tuning),
    )(add_kernel)
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    kernel(x, y, out, n)
    torch.testing.assert_close(out, x + y)
    record = kernel.record()
    assert record is not None and record.device == device
    return record


def test_a_search_starts_from_another_device_kind_s_record_of_the_nearest_key(monkeypatch):
    other = tune_on("GPU A", monkeypatch, n=1024)
    assert other.prior is None  # nothing on another device kind yet
    record = tune_on("GPU B", monkeypatch, n=1000)
    seeds = distinct_best(prior_from_record(other, "").configs_ranked, 2)  # a tenth of 8 configs, at least 2
    assert [t.config for t in record.trials[:2]] == seeds
    assert record.prior is not None and record.prior.device == "GPU A"
    assert "disk entry of key [1024]" in record.prior.source
    assert record.prior.winner_rank == prior_from_record(other, "").rank_of(record.winner)
    assert TuningRecord.from_json(record.to_json()).prior == record.prior
    assert "prior: GPU A (disk entry of key [1024]" in format_summary(record, cache_hit=False)


@triton.jit
def split_add_kernel(x, y, out, n, BLOCK: tl.constexpr, A: tl.constexpr, SPLIT: tl.constexpr = 1):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


UNION = CartesianSpace(BLOCK=[16, 32, 64, 128], A=range(10), SPLIT=[1, 2]) + CartesianSpace(
    BLOCK=[16, 32, 64, 128], A=range(10)
)


def test_a_prior_over_a_union_whose_parts_lack_a_field_seeds_the_search(monkeypatch):
    """Another device kind's record of a union space (one part without SPLIT) raised AttributeError, then
    KeyError, at every new key's call: its configs differ in fields. Its seeds are now proposed first."""
    records = []
    for device, n in (("GPU A", 1024), ("GPU B", 1000)):
        monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", device)
        tuning = Tuning(compile_workers=0, warmup=0, reps=2, refine_topk=0, strategy="model", max_configs=12)
        kernel = autotune(space=UNION, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=tuning)(split_add_kernel)
        x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
        kernel(x, y, out, n)
        torch.testing.assert_close(out, x + y)
        records.append(kernel.record())
    other, record = records
    ranked = prior_from_record(other, "").configs_ranked
    assert {"SPLIT" in c for c in ranked} == {True, False}  # the prior has configs of both parts
    assert record.prior is not None and record.prior.device == "GPU A"
    assert record.trials[0].config == ranked[0]


def test_a_record_of_the_same_device_kind_is_a_warm_start_not_a_prior(monkeypatch):
    other_key = tune_on("GPU A", monkeypatch, n=1024)
    record = tune_on("GPU A", monkeypatch, n=1000)
    assert record.prior is None and record.trials[0].config == other_key.winner


def test_transfer_false_starts_from_nothing(monkeypatch):
    tune_on("GPU A", monkeypatch)
    assert tune_on("GPU B", monkeypatch, transfer=False).prior is None


def test_the_nearest_prior_is_the_nearest_key_with_most_trials_among_equals():
    def record(key, device, ran):
        trials = [{"config": {"X": i}, "status": "ok", "median_ms": 1.0 + i} for i in range(ran)]
        return TuningRecord.from_json(
            json.dumps(
                dict(
                    kernel="k",
                    source_hash="s",
                    device=device,
                    triton_version="t",
                    torch_version="t",
                    space_checksum="c",
                    key=key,
                    winner={"X": 0},
                    trials=trials,
                    tuning_s=1.0,
                )
            )
        )

    found = [
        ("disk", record([4096], "far", 9)),
        ("disk", record([1024], "few", 2)),
        ("remote", record([1024], "many", 5)),
    ]
    prior = nearest_prior((1000,), None, found)
    assert prior is not None and prior.device == "many" and prior.source.startswith("remote entry of key [1024]")
    assert nearest_prior((1000, 3), None, found) is None  # no key of that length
    assert PriorNote(device="d", source="s").winner_rank is None
