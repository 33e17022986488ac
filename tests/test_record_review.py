"""Records read back from real cache files: an "ok" trial without a median is refused where it is read, and a newer
autotune's entries in a key's slots are never replaced (this version uses another slot, quietly)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from test_cache import DT, Tuner, make_record
from test_storage_tiers import cache_with

from autotune import codec
from autotune.errors import CacheWarning
from autotune.record import TuningRecord
from autotune.storage import DiskCache, EntryRef

ROOT = Path(__file__).resolve().parents[1]


def _cache_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def _entry_without_median(tmp_path: Path) -> tuple[DiskCache, EntryRef, Path]:
    """A cache file whose winner's trial says "ok" but has no median_ms (hand-edited, or another writer's)."""
    record = make_record((1,))
    disk, entry = DiskCache(tmp_path), EntryRef.of(record)
    assert disk.put(entry, record)
    path = disk.path(entry)
    data = json.loads(path.read_text())
    assert data["trials"][0]["status"] == "ok"
    del data["trials"][0]["median_ms"]
    path.write_text(json.dumps(data))
    return disk, entry, path


def test_an_ok_trial_without_a_median_is_refused_naming_the_entry_and_the_field(tmp_path):
    disk, entry, path = _entry_without_median(tmp_path)
    text = path.read_text()
    with pytest.raises(codec.ValidationError, match=r"median_ms.*trials\[0\]"):
        TuningRecord.from_json(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert disk.get(entry) is None
    (message,) = _cache_warnings(caught)
    assert str(path) in message and "trials[0]" in message and "median_ms" in message
    assert path.read_text() == text  # kept as it was (a tuning of the key replaces it, as any invalid entry)


def test_cache_show_reports_an_ok_trial_without_a_median_as_unusable(tmp_path):
    _, _, path = _entry_without_median(tmp_path)
    env = dict(os.environ, AUTOTUNE_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-m", "autotune", "cache", "show", "add"], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert f"unusable: {path}" in res.stdout and "trials[0]" in res.stdout and "median_ms" in res.stdout
    assert " ok " not in res.stdout  # not listed as an "ok" trial without a time


def _newer_entry(record: TuningRecord) -> str:
    data = json.loads(record.to_json())
    data.update(schema_version=data["schema_version"] + 1, field_of_a_newer_autotune=[1, 2])
    return json.dumps(data)


def test_a_newer_autotune_s_entry_in_slot_0_stays_and_this_version_stores_its_own_in_another_slot(tmp_path):
    disk = DiskCache(tmp_path)
    entry = cache_with(disk).entry((1,), DT)
    slot0 = disk.path(entry)
    slot0.parent.mkdir(parents=True)
    newer = _newer_entry(make_record((1,), winner=128))
    slot0.write_text(newer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache_with(disk).get_or_tune((1,), DT, Tuner((1,)))[1] == "tuned"
        tuner = Tuner((1,))
        record, got = cache_with(DiskCache(tmp_path)).get_or_tune((1,), DT, tuner)  # a new process
    assert (got, tuner.calls, record.winner["BLOCK"]) == ("disk", 0, 64)
    assert _cache_warnings(caught) == []  # a newer autotune sharing the directory is not a fault
    assert slot0.read_text() == newer
    assert TuningRecord.from_json(disk.path(entry.slots()[1]).read_text()).winner["BLOCK"] == 64


def test_newer_entries_in_every_slot_all_stay_and_one_warning_says_why(tmp_path):
    disk = DiskCache(tmp_path)
    entry = cache_with(disk).entry((1,), DT)
    disk.path(entry).parent.mkdir(parents=True)
    newer = _newer_entry(make_record((1,), winner=128))
    for slot in entry.slots():
        disk.path(slot).write_text(newer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache_with(disk).get_or_tune((1,), DT, Tuner((1,)))[1] == "tuned"
        assert cache_with(disk).get_or_tune((1,), DT, Tuner((1,)))[1] == "tuned"  # nowhere to keep it
    (message,) = _cache_warnings(caught)
    assert "newer autotune" in message and "AUTOTUNE_CACHE_DIR" in message and "add key [1]" in message
    assert all(disk.path(slot).read_text() == newer for slot in entry.slots())
    assert sorted(p.name for p in disk.path(entry).parent.glob("*.json")) == sorted(
        disk.path(slot).name for slot in entry.slots()
    )


def test_a_newer_autotune_s_redis_entries_stay_and_this_version_uses_another_slot_quietly(redis_server):
    from autotune.storage.redis_tier import RedisCache

    tier = RedisCache(redis_server.url, lease_s=30)
    entry = cache_with(tier).entry((1,), DT)
    newer = _newer_entry(make_record((1,), winner=128))
    tier.client.set(tier.key_of(entry.location, entry.entry_id), newer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache_with(tier).get_or_tune((1,), DT, Tuner((1,)))[1] == "tuned"
        tuner = Tuner((1,))
        record, got = cache_with(RedisCache(redis_server.url, lease_s=30)).get_or_tune((1,), DT, tuner)  # a new node
    assert (got, tuner.calls, record.winner["BLOCK"]) == ("remote", 0, 64)
    assert _cache_warnings(caught) == []  # a newer autotune sharing the server is not a fault
    assert tier.client.get(tier.key_of(entry.location, entry.entry_id)).decode() == newer

    for slot in entry.slots()[1:]:  # now a newer autotune holds every slot of the key
        tier.client.set(tier.key_of(slot.location, slot.entry_id), newer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache_with(RedisCache(redis_server.url, lease_s=30)).get_or_tune((1,), DT, Tuner((1,)))[1] == "tuned"
    (message,) = _cache_warnings(caught)
    assert "newer autotune" in message and "AUTOTUNE_REMOTE_PREFIX" in message
    assert all(tier.client.get(tier.key_of(s.location, s.entry_id)).decode() == newer for s in entry.slots())
