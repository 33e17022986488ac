"""`autotune cache clear` and the crash journal: a clear forgets the crash notes of what it cleared, as
`clear_autotune_cache` does, so a config noted as having ended a dead process is tried again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cache_files import write_record
from test_cli import record

from autotune.cli import main
from autotune.storage import journal

REPO = Path(__file__).resolve().parents[1]
KERNEL_ID = "tests.kernels:add"
DTYPES = ("torch.float32",)


def note_of_a_dead_process(kernel_id: str, key: tuple) -> None:
    """A note left by a process that died measuring a config of (kernel_id, key): the journal calls it a crash."""
    code = (
        "import os; from autotune.storage import journal; "
        f"note = journal.measuring({kernel_id!r}, {key!r}, {DTYPES!r}, {{'BLOCK': 32}}); note.__enter__(); os._exit(0)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert journal.crashed(kernel_id, key, DTYPES)


@pytest.mark.parametrize(
    "args",
    [
        ["--kernel", "add", "--key", "1"],  # the entry's kernel, by its short name
        ["--kernel", KERNEL_ID],  # by its module:qualname
        [],  # everything
    ],
)
def test_a_clear_forgets_the_crash_notes_of_what_it_cleared(args, capsys):
    write_record(record("add", [1], dtypes=list(DTYPES), kernel_id=KERNEL_ID))
    note_of_a_dead_process(KERNEL_ID, (1,))
    note_of_a_dead_process(KERNEL_ID, (2,))  # another key: a key's clear leaves it
    assert main(["cache", "clear", *args]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "removed 1 entry" in out and "forgot" in out and "crash note" in out, out
    assert journal.crashed(KERNEL_ID, (1,), DTYPES) == {}
    assert bool(journal.crashed(KERNEL_ID, (2,), DTYPES)) == ("--key" in args)


def test_a_clear_by_module_and_qualname_forgets_a_crash_of_a_first_tuning_that_left_no_entry(capsys):
    note_of_a_dead_process(KERNEL_ID, (1,))
    assert main(["cache", "clear", "--kernel", KERNEL_ID, "--key", "1"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "removed 0 entries" in out and "forgot 1 crash note" in out, out
    assert journal.crashed(KERNEL_ID, (1,), DTYPES) == {}


def test_list_shows_the_configs_noted_as_crashed_that_no_entry_records_yet(capsys):
    note_of_a_dead_process(KERNEL_ID, (1,))
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "CRASHED CONFIG" in out and KERNEL_ID in out and "BLOCK=32" in out and "the process ended" in out, out
    assert "1 config noted by the crash journal: the next tuning" in out, out

    write_record(record("add", [1], dtypes=list(DTYPES), kernel_id=KERNEL_ID))
    assert main(["cache", "list", "--kernel", "add"]) == 0
    out = capsys.readouterr().out
    assert "1 entry in" in out and "1 config noted by the crash journal: the next tuning" in out, out
    assert main(["cache", "list", "--kernel", "other:add"]) == 1  # another module's add: neither entry nor note
    assert "CRASHED CONFIG" not in capsys.readouterr().out
