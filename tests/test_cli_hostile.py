"""Hostile command lines (issue 40, item 15): each is a mistake that exits 2 with one line, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cache_files import write_record
from test_cli import record

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=env, timeout=120, cwd=str(cwd)
    )


def one_line_mistake(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert all(w in res.stderr for w in words), res.stderr


@pytest.mark.parametrize(
    ("key", "kind"), [("{1: 2}", "dict"), ("b'x'", "bytes"), ("1j", "complex"), ("...", "ellipsis"), ("4,{5}", "set")]
)
def test_a_key_no_entry_can_have_is_refused_in_one_line(key, kind):
    from autotune.keyspec import parse_key

    with pytest.raises(ValueError, match=kind):
        parse_key(key)
    assert parse_key("(1, (2, 3), None, True)") == (1, (2, 3), None, True)


def test_cache_clear_and_report_refuse_a_key_that_cannot_be_one():
    write_record(record("K", [1]))
    one_line_mistake(run_cli("cache", "clear", "--kernel", "K", "--key", "{1: 2}"), "dict", "not a key value")
    one_line_mistake(run_cli("report", "K", "--key", "1j"), "complex", "not a key value")
    assert run_cli("cache", "show", "K").returncode == 0  # nothing was cleared


@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="needs Linux's /proc")
def test_report_into_a_file_that_cannot_be_written():
    write_record(record("K", [1]))
    one_line_mistake(run_cli("report", "K", "--csv", "/proc/version"), "cannot write /proc/version")


def test_replay_of_deeply_nested_or_huge_json(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    one_line_mistake(run_cli("replay", str(deep), "--strategy", "random", "--budget", "3"), "not a landscape")
    huge = tmp_path / "huge.json"
    huge.write_text('{"tune_params": {"a": [' + "9" * 5000 + ']}, "cache": {}}')  # over Python's 4,300 digits
    one_line_mistake(run_cli("replay", str(huge), "--strategy", "random", "--budget", "3"), "not a landscape")


def test_replay_of_a_truncated_gzip_or_with_another_kernel_s_prior(tmp_path):
    landscapes = REPO / "bench" / "landscapes"
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes((landscapes / "pnpoly_RTX_3090.json.gz").read_bytes()[:1000])
    one_line_mistake(run_cli("replay", str(cut), "--strategy", "random", "--budget", "3"), "cannot read landscape")
    other = run_cli(
        "replay", str(landscapes / "pnpoly_RTX_3090.json.gz"), "--strategy", "model", "--budget", "3",
        "--prior", str(landscapes / "gemm_RTX_3090.json.gz"),
    )  # fmt: skip
    one_line_mistake(other, "records kernel 'Xgemm'", "'cn_pnpoly'", "same kernel")
