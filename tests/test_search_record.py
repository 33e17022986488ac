"""An entry records the search that found its winner; a stronger search (exhaustive over a budgeted one, a larger
max_configs or max_seconds) tunes the key again, once, saying so; anything else reuses the entry."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch
import triton
import triton.language as tl

from autotune import CartesianSpace, Tuning, autotune, stats
from autotune.record import Search

SPACE = CartesianSpace(BLOCK=[16, 32, 64, 128], A=range(4))  # 16 configs


@triton.jit
def searched_add(x, y, out, n, BLOCK: tl.constexpr, A: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def tuned(**search):
    """A fresh decoration (its own memory; the disk is shared), called once on n=300; its record."""
    kernel = autotune(
        space=SPACE,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0, seed=0, **search),
    )(searched_add)
    x, y, out = torch.rand(300), torch.rand(300), torch.empty(300)
    kernel(x, y, out, 300)
    torch.testing.assert_close(out, x + y)
    return kernel.record()


def tunings() -> int:
    return int(stats()["searched_add"]["tunings"])


def test_a_stronger_search_tunes_again_once_and_a_weaker_or_equal_one_reuses_the_entry(caplog):
    first = tuned(strategy="random", max_configs=3)
    assert first.search == Search(strategy="random", max_configs=3, measured=3) and first.where == "in-process"
    tuned(strategy="random", max_configs=2)
    tuned(strategy="local", max_configs=3)  # another strategy, no larger budget: reused
    assert tunings() == 1
    with caplog.at_level(logging.INFO, logger="autotune"):
        assert tuned(strategy="random", max_configs=5).search.measured == 5
    again = [r.getMessage() for r in caplog.records if "tuning" in r.getMessage() and "again" in r.getMessage()]
    assert len(again) == 1 and "max_configs=5, where its winner was searched with max_configs=3" in again[0]
    assert tunings() == 2
    exhaustive = tuned(strategy="exhaustive")
    assert exhaustive.search == Search(strategy="exhaustive", measured=16) and tunings() == 3
    tuned(strategy="random", max_configs=8)  # the exhaustive entry measured the whole space: nothing to add
    tuned(strategy="exhaustive", max_seconds=60)
    assert tunings() == 3


def test_offline_and_an_entry_without_its_search_never_tune_again(monkeypatch):
    tuned(strategy="random", max_configs=3)
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    assert tuned(strategy="exhaustive").search.strategy == "random"
    monkeypatch.delenv("AUTOTUNE_OFFLINE")
    (path,) = Path(os.environ["AUTOTUNE_CACHE_DIR"]).glob("*/*.json")
    entry = json.loads(path.read_text())
    del entry["search"]  # as an entry written before the search was kept
    path.write_text(json.dumps(entry))
    assert tuned(strategy="exhaustive").search is None
    assert tunings() == 1


def test_a_larger_max_seconds_than_an_exhaustive_search_was_cut_to_tunes_again():
    tuned(strategy="exhaustive", max_seconds=1e-6)  # cut after the first batch
    tuned(strategy="exhaustive", max_seconds=1e-6)
    assert tunings() == 1
    assert tuned(strategy="exhaustive").search == Search(strategy="exhaustive", measured=16)
    assert tunings() == 2


def test_online_tuning_searches_again_over_a_weaker_entry():
    tuned(strategy="random", max_configs=3)
    online = autotune(
        space=SPACE,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(mode="online", strategy="exhaustive", compile_workers=0, reps=1),
    )(searched_add)
    x, y, out = torch.rand(300), torch.rand(300), torch.empty(300)
    online(x, y, out, 300)
    torch.testing.assert_close(out, x + y)
    assert online.cache_info().get("online")  # a session over the space, not the random search's winner
