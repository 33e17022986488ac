"""`clear_autotune_cache` racing a lookup or a tuning of the same key on another thread: a clear is a barrier. What a
lookup or tuning begun before the clear found is launched by that call but not kept after the clear returned: not
in memory, not on disk, so the next call tunes anew (DESIGN.md section 7)."""

from __future__ import annotations

import threading

import pytest
from kernels_for_tests import add_and_check, add_kernel, calling_thread

import autotune
from autotune import autotune as autotune_decorator
from autotune import clear_autotune_cache
from autotune.storage import disk_entries
from autotune.storage.disk import DiskCache

HELD_N = 96


def _kernel(gate: threading.Event, entered: threading.Event):
    def setup(**named):
        if named["n"] == HELD_N:  # the tuning of this key waits in its first trial until the test lets it go
            entered.set()
            assert gate.wait(60)

    return autotune_decorator(
        space={"BLOCK": [16, 32]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        setup=setup,
        tuning={"warmup": 0, "reps": 1, "isolate": "off"},
    )(add_kernel)


@pytest.mark.parametrize("how", ["object", "name", "everything", "object and key", "name and key"])
def test_a_clear_during_a_tuning_keeps_its_winner_out_of_memory_and_disk(how):
    gate, entered = threading.Event(), threading.Event()
    kernel = _kernel(gate, entered)
    errors: list[BaseException] = []
    tuner = calling_thread(kernel, HELD_N, errors)
    tuner.start()
    try:
        assert entered.wait(60)
        args = {
            "object": dict(kernel=kernel),
            "name": dict(kernel="add_kernel"),
            "everything": {},
            "object and key": dict(kernel=kernel, key=(HELD_N,)),
            "name and key": dict(kernel="add_kernel", key=HELD_N),
        }[how]
        clear_autotune_cache(**args)
    finally:
        gate.set()
        tuner.join(60)
    assert not tuner.is_alive() and errors == []  # the call that tuned launched its winner
    assert kernel.cache.records() == {}
    assert disk_entries("add_kernel") == []
    add_and_check(kernel, HELD_N)  # the next call tunes anew, and keeps that winner
    assert autotune.stats()["add_kernel"]["tunings"] == 2
    assert len(kernel.cache.records()) == 1 and len(disk_entries("add_kernel")) == 1


def test_a_clear_of_another_key_during_a_tuning_keeps_its_winner():
    gate, entered = threading.Event(), threading.Event()
    kernel = _kernel(gate, entered)
    errors: list[BaseException] = []
    tuner = calling_thread(kernel, HELD_N, errors)
    tuner.start()
    try:
        assert entered.wait(60)
        clear_autotune_cache(kernel, key=(HELD_N + 1,))
    finally:
        gate.set()
        tuner.join(60)
    assert not tuner.is_alive() and errors == []  # the tuning call returned and launched its winner
    assert [key for key, _ in kernel.cache.records()] == [(HELD_N,)]
    assert len(disk_entries("add_kernel")) == 1


def test_a_winner_read_from_disk_before_a_clear_is_not_put_back_in_memory(monkeypatch):
    kernel = _kernel(threading.Event(), threading.Event())
    add_and_check(kernel, 64)
    kernel.cache.forget()  # the winner is on disk only: the next call reads it there
    read, go = threading.Event(), threading.Event()
    real_get = DiskCache.get

    def get(self, entry):
        record = real_get(self, entry)
        if threading.current_thread().name == "reader":
            read.set()
            assert go.wait(60)
        return record

    monkeypatch.setattr(DiskCache, "get", get)
    errors: list[BaseException] = []
    reader = calling_thread(kernel, 64, errors, name="reader")
    reader.start()
    try:
        assert read.wait(60)  # the reader holds the entry's record, not yet in memory
        assert clear_autotune_cache(kernel, key=(64,)) == 1
    finally:
        go.set()
        reader.join(60)
    assert not reader.is_alive() and errors == []  # the reader's call launched the winner it read
    assert kernel.cache.records() == {}, "the cleared winner came back into memory"
    assert disk_entries("add_kernel") == []
