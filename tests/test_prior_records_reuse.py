"""A new key's warm start and prior read the kernel's disk entries (`KernelCache.tuned_records`, `prior_records`):
each entry file is read once per process while it is unchanged, not at every new key (with 2,000 entries of another
device kind that was 3-5 s per new key). A rewritten, new or removed file is seen at the next read, and the list is
the one a full read of the tier gives."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import torch
import triton
import triton.language as tl

from autotune import CartesianSpace, Tuning, autotune, clear_autotune_cache
from autotune.storage import files
from autotune.storage.disk import DiskCache
from autotune.storage.protocol import EntryRef

pytest.importorskip("optuna")


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr, A: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


SPACE = CartesianSpace(BLOCK=[16, 32, 64, 128], A=range(4))


def decorate():
    tuning = Tuning(compile_workers=0, warmup=0, reps=2, refine_topk=0, strategy="model", max_configs=6)
    return autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=tuning)(add_kernel)


def run(kernel, n: int) -> None:
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    kernel(x, y, out, n)
    torch.testing.assert_close(out, x + y)


@pytest.fixture
def other_kind(monkeypatch):
    """Six entries tuned on "GPU A" (one real tuning, copied under other keys) and one of another kernel source,
    then this process as "GPU B": (the records of GPU A by key, the other source's file)."""
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU A")
    tuned = decorate()
    run(tuned, 1000)
    record = tuned.record()
    disk = DiskCache()
    records = {1000: record}
    for n in (1100, 1200, 1300, 1400, 1500):
        records[n] = msgspec.structs.replace(record, key=[n])
        assert disk.put(EntryRef.of(records[n]), records[n])
    stranger = msgspec.structs.replace(record, key=[1600], source_hash="another source")
    assert disk.put(EntryRef.of(stranger), stranger)
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU B")
    return records, files.record_path(stranger)


@pytest.fixture
def reads(monkeypatch):
    """The entry files the listings read and decode (`files.load_record`'s reads), in order."""
    seen: list[Path] = []
    real = files.read_entry_bytes

    def counted(path, *args, **kwargs):
        seen.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(files, "read_entry_bytes", counted)
    return seen


def full_read(cache) -> list:
    """What prior_records listed before: every disk entry decoded, then filtered (as `view` sees them)."""
    return view(
        ("disk", e.record)
        for e in DiskCache().entries(cache.kernel_name)
        if e.record.device != "GPU B"
        and (e.record.kernel_id, e.record.source_hash, e.record.space_checksum)
        == (cache.identity, cache.source_hash, cache.space_checksum)
    )


def view(pairs) -> list:
    """What a prior is built from: each record's tier, key, device, winner and its trials that ran with their medians
    (the records kept hold only those, without samples)."""
    return [(tier, r.key, r.device, r.winner, [(t.config, t.median_ms) for t in r.trials if t.ok]) for tier, r in pairs]


def test_kept_records_are_small_and_share_their_configs(other_kind):
    """A kept record holds its trials that ran, without samples, and every record's trials share one object per
    config: thousands of entries of hundreds of trials stay a few MB for the life of the kernel."""
    records, _ = other_kind
    found = decorate().cache.prior_records()
    assert all(t.ok and t.samples_ms == [] for _, r in found for t in r.trials)
    configs = {id(t.config) for _, r in found for t in r.trials}
    assert len(configs) == len({t.config for t in records[1000].trials if t.ok})


def test_a_later_new_key_reads_no_unchanged_entry_file_again(other_kind, reads):
    records, stranger = other_kind
    gpu_a = {stranger, *map(files.record_path, records.values())}
    kernel = decorate()
    run(kernel, 1000)  # the first new key of the process reads every entry once
    assert kernel.record().prior is not None and kernel.record().prior.device == "GPU A"
    first = {p for p in reads if p in gpu_a}
    assert len(first) == 7 and stranger in first  # six priors and the other source's entry
    reads.clear()
    run(kernel, 2000)  # a later new key: its warm start and prior read none of them again
    assert kernel.record().prior is not None and kernel.record().prior.device == "GPU A"
    assert not {p for p in reads if p in gpu_a}


def test_a_rewritten_added_or_removed_entry_file_is_seen_at_the_next_read(other_kind, reads):
    records, stranger = other_kind
    cache = decorate().cache
    before = cache.prior_records()
    assert view(before) == full_read(cache) and sorted(r.key[0] for _, r in before) == sorted(records)
    reads.clear()
    assert cache.prior_records() == before and not reads  # nothing changed: nothing read
    rewritten = msgspec.structs.replace(records[1200], trials=records[1200].trials[:2])
    assert DiskCache().put(EntryRef.of(rewritten), rewritten)  # another process's new record of the key
    added = msgspec.structs.replace(records[1000], key=[1700])
    assert DiskCache().put(EntryRef.of(added), added)
    files.record_path(records[1400]).unlink()
    reads.clear()
    after = cache.prior_records()
    assert sorted(reads) == sorted([files.record_path(rewritten), files.record_path(added)])
    assert view(after) == full_read(cache)
    by_key = {r.key[0]: r for _, r in after}
    assert sorted(by_key) == [1000, 1100, 1200, 1300, 1500, 1700]
    assert view([("disk", by_key[1200]), ("disk", by_key[1700])]) == view([("disk", rewritten), ("disk", added)])
    clear_autotune_cache()
    assert cache.prior_records() == [] == full_read(cache)


def test_an_entry_of_another_source_rewritten_as_this_one_s_becomes_a_prior(other_kind, reads):
    records, stranger = other_kind
    cache = decorate().cache
    assert len(cache.prior_records()) == 6
    mine = msgspec.structs.replace(records[1000], key=[1600])  # same file as the other source's entry
    assert files.record_path(mine) == stranger
    assert DiskCache().put(EntryRef.of(mine), mine)
    reads.clear()
    found = cache.prior_records()
    assert reads == [stranger] and len(found) == 7
    assert view(found) == full_read(cache)
