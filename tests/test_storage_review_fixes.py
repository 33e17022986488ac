"""Review fixes in storage: a crashed process not yet reaped (a zombie) is dead to the crash journal; a clear by a
kernel's name forgets its crash notes also where the kernel is neither loaded nor cached; an offline miss says
when entries of the key exist for another device."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from kernels_for_tests import add_kernel

from autotune import CacheWarning, Config, Tuning, autotune, clear_autotune_cache
from autotune.cli import main
from autotune.storage import files, journal, kernel_cache
from autotune.storage.files import pid_alive

REPO = Path(__file__).resolve().parents[1]
DTYPES = ("torch.float32",)


def _child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as stat_file:
        return stat_file.read(4096).rpartition(b")")[2].split()[0].decode()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process states are read from Linux's /proc")
def test_a_process_that_died_measuring_and_is_not_yet_reaped_is_a_crash_not_a_live_measurement():
    code = (
        "import os, signal; from autotune.storage import journal\n"
        "with journal.measuring('m:k', (100,), ('torch.float32',), {'BLOCK': 32}):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], env=_child_env())  # never waited for until the end
    try:
        deadline = time.monotonic() + 120
        while _state(child.pid) != "Z":  # dead, its exit status not collected: a zombie
            assert time.monotonic() < deadline, "the child did not end"
            time.sleep(0.05)
        assert not pid_alive(child.pid)
        assert set(journal.crashed("m:k", (100,), DTYPES)) == {Config(BLOCK=32)}
    finally:
        assert child.wait(timeout=60) == -signal.SIGKILL


def note_of_a_dead_process(kernel_id: str, key: tuple) -> None:
    """A note left by a process that died measuring a config of (kernel_id, key): the journal calls it a crash."""
    code = (
        "import os; from autotune.storage import journal; "
        f"note = journal.measuring({kernel_id!r}, {key!r}, {DTYPES!r}, {{'BLOCK': 32}}); note.__enter__(); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code], env=_child_env(), check=True, timeout=120)
    assert journal.crashed(kernel_id, key, DTYPES)


FACTORY_VARIANT = "some.module:make.<locals>.add#1a2b3c4d"


@pytest.mark.parametrize(
    ("kernel_id", "name"),
    [
        ("some.module:add", "add"),  # a short name: every module's kernel of that name
        ("some.module:add", "some.module:add"),
        (FACTORY_VARIANT, "some.module:make.<locals>.add"),  # a module:qualname names its factory variants
        (FACTORY_VARIANT, "add"),
        (FACTORY_VARIANT, FACTORY_VARIANT),
    ],
)
def test_a_clear_by_name_forgets_the_crash_notes_of_a_kernel_neither_loaded_nor_cached(kernel_id, name):
    note_of_a_dead_process(kernel_id, (1,))  # a crash in the key's first tuning: a note, no entry
    note_of_a_dead_process(kernel_id, (2,))
    note_of_a_dead_process("some.module:other", (1,))  # another kernel's: stays
    assert clear_autotune_cache(name, key=1) == 0
    assert journal.crashed(kernel_id, (1,), DTYPES) == {}
    assert journal.crashed(kernel_id, (2,), DTYPES)  # another key: a key's clear leaves it
    assert clear_autotune_cache(name) == 0
    assert journal.crashed(kernel_id, (2,), DTYPES) == {}
    assert journal.crashed("some.module:other", (1,), DTYPES)


def test_the_cli_clear_by_short_name_forgets_the_same_notes(capsys):
    note_of_a_dead_process(FACTORY_VARIANT, (1,))
    assert main(["cache", "clear", "--kernel", "add"]) == 0, capsys.readouterr()
    assert "forgot 1 crash note" in capsys.readouterr().out
    assert journal.crashed(FACTORY_VARIANT, (1,), DTYPES) == {}


def _offline_kernel():
    """A fresh decoration of the tests' `add_kernel`: empty memory, the shared disk."""
    return autotune(
        space=[{"BLOCK": 64}, {"BLOCK": 32}],
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0),
    )(add_kernel)


def _warnings_of_call(kernel, n: int) -> list[str]:
    """The CacheWarnings of one call of `kernel` for `n` (its result checked)."""
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(x, y, out, n)
    torch.testing.assert_close(out, x + y)
    return [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def _call_fresh_decoration(n: int) -> list[str]:
    return _warnings_of_call(_offline_kernel(), n)


def test_an_offline_miss_says_that_entries_of_the_key_exist_for_another_device(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU A")
    _call_fresh_decoration(100)  # tuned and stored for GPU A
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU B")
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    (warning,) = _call_fresh_decoration(100)
    assert "AUTOTUNE_OFFLINE=1 and no usable cached winner" in warning, warning
    assert "entries of this key exist for device 'GPU A', this process is 'GPU B'" in warning, warning
    assert "AUTOTUNE_DEVICE_KIND" in warning
    (other_key,) = _call_fresh_decoration(200)  # no entry of this key anywhere: nothing about devices
    assert "no cached winner" in other_key and "device" not in other_key, other_key


def test_an_offline_miss_reads_the_directory_once_and_finds_an_entry_past_many_others(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU A")
    _warnings_of_call(_offline_kernel(), 100)  # tuned and stored for GPU A
    (path,) = Path(os.environ["AUTOTUNE_CACHE_DIR"]).rglob("*.json")
    record = json.loads(path.read_text())
    for i in range(300):  # other keys of GPU A, named to come before the key's own entry
        other = dict(record, key=[1000 + i])
        (path.parent / f"{i:032x}.json").write_text(json.dumps(other))
    path.rename(path.parent / ("f" * 32 + ".json"))
    reads = [0]
    real = files.read_entry_bytes

    def counting(*args, **kwargs):
        reads[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel_cache, "read_entry_bytes", counting, raising=False)
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU B")
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    kernel = _offline_kernel()
    (warning,) = _warnings_of_call(kernel, 100)
    assert "entries of this key exist for device 'GPU A', this process is 'GPU B'" in warning, warning
    assert reads[0] == 301, reads[0]  # each entry file once
    for n in (200, 300):  # new keys: the map built on the first miss answers them
        (other,) = _warnings_of_call(kernel, n)
        assert "no cached winner" in other and "device" not in other, other
    assert reads[0] == 301, reads[0]


def test_a_deeply_nested_file_beside_the_entries_never_fails_an_offline_warnings_of_call(monkeypatch):
    """The diagnosis skips what it cannot read: a file nested past msgspec's depth raised RecursionError into the
    kernel's call."""
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU A")
    _warnings_of_call(_offline_kernel(), 100)
    (path,) = Path(os.environ["AUTOTUNE_CACHE_DIR"]).rglob("*.json")
    (path.parent / ("0" * 32 + ".json")).write_text('{"trials": ' + "[" * 100_000 + "]" * 100_000 + "}")
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU B")
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    (warning,) = _warnings_of_call(_offline_kernel(), 100)
    assert "entries of this key exist for device 'GPU A', this process is 'GPU B'" in warning, warning
