"""The command line: `python -m autotune cache ...` in a real subprocess, plus its helpers in-process."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cache_files import write_record

from autotune import cli
from autotune.format import format_table
from autotune.options import cache_dir
from autotune.record import Trial, TrialStatus, TuningRecord
from autotune.space import Config
from autotune.storage import device_fingerprint, disk_entries, runtime_versions

REPO = Path(__file__).resolve().parents[1]
F32 = ["torch.float32", "torch.float32"]
F16 = ["torch.float16", "torch.float16"]


def record(kernel, key, dtypes=F32, winner=64, device=None, kernel_id=None) -> TuningRecord:
    tv, pv = runtime_versions()
    trials = [
        Trial(
            config=Config(BLOCK=b),
            status=TrialStatus.OK,
            median_ms=0.01 * b if b != winner else 0.123,
            min_ms=0.1,
            samples_ms=[0.1, 0.2],
        )
        for b in (32, 64, 128)
    ]
    trials.append(
        Trial(
            config=Config(BLOCK=4096),
            status=TrialStatus.COMPILE_ERROR,
            error="out of resources: shared memory\nmore detail",
        )
    )
    return TuningRecord(
        kernel=kernel,
        source_hash="ab" * 32,
        device=device or device_fingerprint(),
        triton_version=tv,
        torch_version=pv,
        space_checksum="cd" * 32,
        key=list(key),
        dtypes=list(dtypes),
        winner=Config(BLOCK=winner),
        trials=trials,
        tuning_s=1.5,
        kernel_id=kernel_id,
    )


def run_cli(*args: str, cache: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if cache is not None:
        env["AUTOTUNE_CACHE_DIR"] = cache
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=env, timeout=120, cwd=str(REPO)
    )


@pytest.fixture
def filled():
    write_record(record("matmul", [1024, 512, 256], winner=128))
    write_record(record("vadd", [1024]))
    write_record(record("vadd", [1024], F16, winner=32))
    write_record(record("vadd", [256]))
    write_record(record("vadd", [1024, 512]))
    return Path(cache_dir())


def test_list_empty():
    res = run_cli("cache", "list")
    assert res.returncode == 0 and "no entries" in res.stdout


def test_list_shows_a_table(filled):
    bad = filled / "vadd" / ("e" * 32 + ".json")
    bad.write_text('{"schema_version": 1, "kernel": "vadd"')  # truncated
    res = run_cli("cache", "list")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["KERNEL", "KEY", "DTYPES", "DEVICE", "WINNER", "MEDIAN_MS", "AGE"]
    rows = [line.split() for line in lines[2:7]]
    assert [r[:2] for r in rows] == [
        ["matmul", "[1024,512,256]"],
        ["vadd", "[256]"],
        ["vadd", "[1024]"],
        ["vadd", "[1024]"],
        ["vadd", "[1024,512]"],
    ]
    assert rows[0][2:6] == ["float32,float32", "interpreter", "BLOCK=128", "0.1230"]
    assert {r[4] for r in rows[2:4]} == {"BLOCK=64", "BLOCK=32"}
    assert bad.name in res.stdout and "not valid JSON" in res.stdout
    assert "5 entries, 1 unusable" in res.stdout
    # columns line up: every row of the table starts its KEY column where the header does
    col = lines[0].index("KEY")
    assert all(line[col - 2 : col] == "  " and line[col] != " " for line in lines[2:7])


def test_list_filters_and_json(filled):
    res = run_cli("cache", "list", "--kernel", "matmul", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert len(data) == 1 and data[0]["record"]["key"] == [1024, 512, 256] and data[0]["error"] is None


def test_show_kernel_with_trials(filled):
    res = run_cli("cache", "show", "vadd")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.count("vadd  key=") == 4
    assert "winner:    BLOCK=64" in out and "compile_error" in out and "out of resources: shared memory" in out
    assert "more detail" not in out  # first line of an error only
    star = [line for line in out.splitlines() if line.strip().startswith("*")]
    assert len(star) == 4 and all("0.1230" in line for line in star)  # the winner, on top of each table


def test_list_of_a_kernel_with_no_entries_names_it_and_exits_1_as_show_does(filled):
    res = run_cli("cache", "list", "--kernel", "vad")
    assert res.returncode == 1 and "no entries for kernel 'vad'" in res.stderr and res.stdout == ""
    res = run_cli("cache", "list", "--kernel", "vadd")
    assert res.returncode == 0 and res.stdout.count("vadd") >= 4


def test_show_one_key_and_unknown(filled):
    res = run_cli("cache", "show", "vadd", "--key", "1024")
    assert res.returncode == 0 and res.stdout.count("vadd  key=[1024]") == 2
    res = run_cli("cache", "show", "vadd", "--key", "[1024, 512]")
    assert res.returncode == 0 and res.stdout.count("key=[1024,512]") == 1
    res = run_cli("cache", "show", "nope")
    assert res.returncode == 1 and "no entries for kernel 'nope'" in res.stderr
    for command in (["show", "vadd"], ["clear", "--kernel", "vadd"]):  # a key that matches nothing: the cached ones
        res = run_cli("cache", *command, "--key", "1025")
        assert res.returncode == 1, res.stderr
        cached = "(256,) float32,float32; (1024,) float16,float16; (1024,) float32,float32; (1024, 512) float32,float32"
        assert f"; its cached keys: {cached}" in res.stderr, res.stderr


@pytest.mark.parametrize("key_arg, left", [("1024", 3), ("[1024, 512]", 4), ("1024,512", 4), ("256", 4)])
def test_clear_a_key(filled, key_arg, left):
    res = run_cli("cache", "clear", "--kernel", "vadd", "--key", key_arg)
    assert res.returncode == 0, res.stderr
    removed = 5 - left
    assert f"removed {removed} entr" in res.stdout
    assert len(disk_entries()) == left


def test_clear_kernel_and_all(filled):
    res = run_cli("cache", "clear", "--kernel", "vadd")
    assert res.returncode == 0 and "removed 4 entries (kernel 'vadd')" in res.stdout
    assert [e.kernel for e in disk_entries()] == ["matmul"]
    res = run_cli("cache", "clear")
    assert res.returncode == 0 and "removed 1 entry (all kernels)" in res.stdout
    assert disk_entries() == []


def test_clear_key_without_kernel_is_an_error(filled):
    res = run_cli("cache", "clear", "--key", "1024")
    assert res.returncode == 2 and "--key needs --kernel" in res.stderr
    assert len(disk_entries()) == 5


def test_cache_dir_option_and_path(tmp_path):
    other = tmp_path / "elsewhere"
    res = run_cli("cache", "path", "--cache-dir", str(other))
    assert res.returncode == 0 and res.stdout.strip() == str(other)
    res = run_cli("cache", "path")
    assert res.stdout.strip() == cache_dir()


def test_usage_errors():
    res = run_cli()
    assert res.returncode == 2 and "usage: autotune" in res.stderr
    res = run_cli("cache", "bogus")
    assert res.returncode == 2


# ---------------------------------------------------------------------------------------------- in-process


def test_parse_key():
    assert cli.parse_key("1024") == (1024,)
    assert cli.parse_key("[1024, 512]") == (1024, 512)
    assert cli.parse_key("1024,512") == (1024, 512)
    assert cli.parse_key("1024, fp16") == (1024, "fp16")
    assert cli.parse_key('"abc"') == ("abc",)
    assert cli.parse_key("abc") == ("abc",)
    assert cli.parse_key("[[2, 3], 1]") == ([2, 3], 1)


def test_format_table_aligns():
    text = format_table(["A", "LONGER"], [["xxxx", 1], ["y", 22]], right={1})
    assert text.splitlines() == ["A     LONGER", "----  ------", "xxxx       1", "y         22"]


def test_main_in_process(filled, capsys):
    assert cli.main(["cache", "clear", "--kernel", "matmul"]) == 0
    assert "removed 1 entry" in capsys.readouterr().out


def test_version_prints_the_package_version():
    import autotune

    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"autotune {autotune.__version__}", res.stdout + res.stderr


def test_subcommands_can_be_registered(monkeypatch, capsys):
    calls = []

    def register(subparsers: argparse._SubParsersAction) -> None:
        p = subparsers.add_parser("hello")
        p.add_argument("--name", default="world")
        p.set_defaults(func=lambda args: calls.append(args.name) or 3)

    monkeypatch.setattr(cli, "REGISTRARS", [cli.register_cache, register])
    assert cli.main(["hello", "--name", "x"]) == 3 and calls == ["x"]

    # A module named in SUBCOMMAND_MODULES contributes through register_cli; a missing one is skipped.
    import types

    mod = types.ModuleType("autotune_fake_plugin")
    mod.register_cli = lambda sp: sp.add_parser("plugged").set_defaults(func=lambda a: 0)
    monkeypatch.setitem(sys.modules, "autotune_fake_plugin", mod)
    mod.other = lambda sp: sp.add_parser("other").set_defaults(func=lambda a: 4)
    monkeypatch.setitem(sys.modules, "autotune_fake_plugin", mod)
    monkeypatch.setattr(
        cli, "SUBCOMMAND_MODULES", ["autotune_fake_plugin", "autotune_fake_plugin:other", "autotune_not_there_yet"]
    )
    assert cli.main(["plugged"]) == 0
    assert cli.main(["other"]) == 4


def test_report_subcommand_is_wired(filled):
    res = run_cli("report", "vadd", "--key", "256")
    assert res.returncode == 0, res.stderr
    assert "BLOCK" in res.stdout


def test_console_script(tmp_path):
    """The `autotune` script pip installed next to this interpreter (found there, whatever PATH holds), running
    this checkout."""
    import sysconfig

    scripts = {Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))}
    found = [d / name for d in scripts for name in ("autotune", "autotune.exe") if (d / name).is_file()]
    if not found:
        pytest.skip(f"the autotune console script is not installed next to {sys.executable} (pip install -e .)")
    write_record(record("vadd", [8]))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    res = subprocess.run([str(found[0]), "cache", "list"], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert "vadd" in res.stdout and "[8]" in res.stdout


# --- #12 items 23, 24: one key syntax everywhere; no match is an error; help texts ---------------------------------


@pytest.mark.parametrize("spelling", ["(4096,)", "[4096]", "4096", " 4096 "])
def test_one_key_syntax_in_report_cache_show_and_cache_clear(spelling, capsys):
    write_record(record("vadd", [4096]))
    write_record(record("vadd", [1024]))
    assert cli.main(["report", "vadd", "--key", spelling]) == 0
    assert "4096" in capsys.readouterr().out
    assert cli.main(["cache", "show", "vadd", "--key", spelling]) == 0
    shown = capsys.readouterr().out
    assert "key=[4096]" in shown and "key=[1024]" not in shown
    assert cli.main(["cache", "clear", "--kernel", "vadd", "--key", spelling]) == 0
    assert sorted(e.record.key for e in disk_entries("vadd")) == [[1024]]


def test_two_value_key_spellings_agree(capsys):
    write_record(record("mm", [4096, 1024]))
    write_record(record("mm", [4096, 2048]))  # a decoy: a loose match would show it too
    outputs = set()
    for spelling in ("4096,1024", "(4096, 1024)", "[4096, 1024]"):
        assert cli.main(["cache", "show", "mm", "--key", spelling]) == 0
        assert cli.main(["report", "mm", "--key", spelling]) == 0
        outputs.add(capsys.readouterr().out)
    assert len(outputs) == 1
    (shown,) = outputs
    assert "1024" in shown and "2048" not in shown


def test_a_key_that_matches_nothing_says_so_and_exits_non_zero(capsys):
    write_record(record("vadd", [4096]))
    assert cli.main(["report", "vadd", "--key", "8192"]) != 0
    assert cli.main(["cache", "show", "vadd", "--key", "8192"]) != 0
    assert cli.main(["cache", "clear", "--kernel", "vadd", "--key", "8192"]) != 0
    assert "nothing matched" in capsys.readouterr().err
    assert [e.record.key for e in disk_entries("vadd")] == [[4096]]


def test_every_subcommand_has_a_description_and_no_help_names_an_internal_function():
    parser = cli.build_parser()
    texts = []

    def walk(p):
        for action in p._actions:
            texts.append(action.help or "")
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    assert sub.description, f"`autotune ... {name}` has no description"
                    texts.append(sub.description)
                    walk(sub)

    walk(parser)
    import re

    assert not [t for t in texts if re.search(r"\b[a-z]+_[a-z_]+\(|see [a-z]+_[a-z_]+", t)]


# --- kernels of one short name in two modules: told apart in every listing, picked by module:qualname ------------

A_ID, B_ID = "kmod:add_kernel", "other.kmod:add_kernel"


@pytest.fixture
def twins():
    """`add_kernel` of two modules, one key each with different winners, and `vadd` of one module."""
    write_record(record("add_kernel", [1000], winner=32, kernel_id=A_ID))
    write_record(record("add_kernel", [1000], winner=128, kernel_id=B_ID))
    write_record(record("vadd", [1024], kernel_id="kmod:vadd"))
    return Path(cache_dir())


def _rows(stdout: str) -> list[list[str]]:
    """The table rows of `cache list` (header and rule left out), split into cells."""
    lines = stdout.split("\n\n")[0].splitlines()
    return [line.split() for line in lines[2:]]


def test_list_names_kernels_of_one_name_by_module_and_the_others_as_before(twins):
    res = run_cli("cache", "list")
    assert res.returncode == 0, res.stderr
    rows = _rows(res.stdout)
    assert [(r[0], r[1], r[4]) for r in rows] == [
        (A_ID, "[1000]", "BLOCK=32"),
        (B_ID, "[1000]", "BLOCK=128"),
        ("vadd", "[1024]", "BLOCK=64"),
    ]
    res = run_cli("cache", "list", "--json")
    data = json.loads(res.stdout)
    assert [(d["kernel"], d["kernel_id"]) for d in data] == [
        ("add_kernel", A_ID),
        ("add_kernel", B_ID),
        ("vadd", "kmod:vadd"),
    ]


def test_module_qualname_picks_one_kernel_in_list_show_and_report_and_the_short_name_both(twins):
    res = run_cli("cache", "list", "--kernel", A_ID)
    assert res.returncode == 0, res.stderr
    assert [(r[0], r[4]) for r in _rows(res.stdout)] == [("add_kernel", "BLOCK=32")]  # one kernel: its short name
    assert "1 entry in" in res.stdout
    data = json.loads(run_cli("cache", "list", "--kernel", B_ID, "--json").stdout)
    assert [(d["kernel_id"], d["record"]["winner"]) for d in data] == [(B_ID, {"BLOCK": 128})]
    res = run_cli("cache", "list", "--kernel", "add_kernel")
    assert [r[0] for r in _rows(res.stdout)] == [A_ID, B_ID]

    res = run_cli("cache", "show", B_ID, "--key", "1000")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("key=[1000]") == 1 and "winner:    BLOCK=128" in res.stdout
    assert "BLOCK=32" not in res.stdout.split("winner:")[1].splitlines()[0]
    res = run_cli("cache", "show", "add_kernel")
    assert res.returncode == 0, res.stderr
    assert f"{A_ID}  key=[1000]" in res.stdout and f"{B_ID}  key=[1000]" in res.stdout

    res = run_cli("report", A_ID)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count(" key=(1000,)") == 1 and "winner Config(BLOCK=32)" in res.stdout
    assert res.stdout.startswith("add_kernel key=(1000,)")
    res = run_cli("report", "add_kernel", "--key", "1000")
    assert res.returncode == 0, res.stderr
    headers = [line for line in res.stdout.splitlines() if " key=(1000,)" in line]
    assert [h.split()[0] for h in headers] == [A_ID, B_ID]
    assert "winner Config(BLOCK=32)" in headers[0] and "winner Config(BLOCK=128)" in headers[1]


def test_clear_by_module_qualname_removes_that_kernel_s_entries_only(twins):
    res = run_cli("cache", "clear", "--kernel", A_ID, "--key", "1000")
    assert res.returncode == 0, res.stderr
    assert f"removed 1 entry (kernel '{A_ID}' key [1000])" in res.stdout
    assert sorted(e.record.kernel_id for e in disk_entries()) == ["kmod:vadd", B_ID]
    res = run_cli("cache", "clear", "--kernel", A_ID)  # nothing of it is left
    assert res.returncode == 1 and "nothing matched" in res.stderr and B_ID in res.stderr
    write_record(record("add_kernel", [1000], winner=32, kernel_id=A_ID))
    res = run_cli("cache", "clear", "--kernel", "add_kernel")  # the short name: every module's
    assert res.returncode == 0 and "removed 2 entries (kernel 'add_kernel')" in res.stdout, res.stderr
    assert [e.record.kernel_id for e in disk_entries()] == ["kmod:vadd"]


def test_export_by_module_qualname_takes_that_kernel_s_records_only(twins, tmp_path):
    import tarfile

    def exported(*kernels: str) -> list[dict]:
        archive = tmp_path / "a.tar.gz"
        args = [a for k in kernels for a in ("--kernel", k)]
        res = run_cli("export", str(archive), *args, "--triton-cache-dir", str(tmp_path / "no-triton-cache"))
        assert res.returncode == 0, res.stderr
        with tarfile.open(archive) as tar:
            return [json.load(tar.extractfile(m)) for m in tar.getmembers() if m.name.startswith("records/")]

    assert [(r["kernel_id"], r["winner"]) for r in exported(B_ID)] == [(B_ID, {"BLOCK": 128})]
    assert sorted(r["kernel_id"] for r in exported("add_kernel")) == [A_ID, B_ID]
    assert sorted(r["kernel_id"] for r in exported(A_ID, "vadd")) == [A_ID, "kmod:vadd"]


@pytest.mark.parametrize("wrong", ["nomod:add_kernel", "kmod:add_kernl"])
def test_a_module_qualname_that_matches_nothing_says_so_and_exits_1(twins, tmp_path, wrong):
    for args in (
        ("cache", "list", "--kernel", wrong),
        ("cache", "show", wrong),
        ("cache", "clear", "--kernel", wrong),
        ("report", wrong),
    ):
        res = run_cli(*args)
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        assert wrong in res.stderr and res.stdout == "", args
    res = run_cli("cache", "list", "--kernel", "nomod:add_kernel")
    assert f"kernels named add_kernel: {A_ID}, {B_ID}" in res.stderr  # the likely fix, named
    res = run_cli("export", str(tmp_path / "a.tar.gz"), "--kernel", wrong, "--triton-cache-dir", str(tmp_path))
    assert res.returncode == 1 and "nothing to export" in res.stderr and wrong in res.stderr
    assert len(disk_entries()) == 3


# --- a kernel name that matches nothing: every message ends with the closest cached kernel (errors.did_you_mean) ---

VA_ID = "kernels.vector_add:_add_kernel"  # what `add_kernel = make_add()` stores its entries under


@pytest.fixture
def vector_add_cached():
    """kernels/vector_add.py's entries: short name `_add_kernel` (the jit function), not the attribute `add_kernel`."""
    write_record(record("_add_kernel", [1024], kernel_id=VA_ID))
    write_record(record("vadd", [1024], kernel_id="kmod:vadd"))
    return Path(cache_dir())


@pytest.mark.parametrize(
    "wrong, close", [("kernels.vector_add:add_kernel", VA_ID), ("add_kernel", "_add_kernel"), ("vad", "vadd")]
)
def test_an_unknown_kernel_name_is_answered_with_the_closest_cached_one_in_the_form_written(
    vector_add_cached, tmp_path, capsys, wrong, close
):
    for args in (
        ["cache", "list", "--kernel", wrong],
        ["cache", "show", wrong],
        ["cache", "clear", "--kernel", wrong],
        ["report", wrong],
        ["export", str(tmp_path / "a.tar.gz"), "--kernel", wrong, "--triton-cache-dir", str(tmp_path)],
    ):
        assert cli.main(args) == 1, args
        out = capsys.readouterr()
        assert out.out == "" and wrong in out.err, args
        assert out.err.rstrip().endswith(f". Did you mean {close!r}?"), (args, out.err)
    assert len(disk_entries()) == 2 and not (tmp_path / "a.tar.gz").exists()


def test_a_key_that_matches_nothing_of_a_cached_kernel_suggests_no_other_kernel(vector_add_cached, capsys):
    assert cli.main(["cache", "show", "vadd", "--key", "8192"]) == 1
    assert cli.main(["cache", "clear", "--kernel", "vadd", "--key", "8192"]) == 1
    assert "Did you mean" not in capsys.readouterr().err


def test_export_of_names_close_to_nothing_cached_says_so_without_a_suggestion(vector_add_cached, tmp_path, capsys):
    assert (
        cli.main(
            [
                "export",
                str(tmp_path / "a.tar.gz"),
                "--kernel",
                "zzzzzz",
                "--kernel",
                "vad",
                "--triton-cache-dir",
                str(tmp_path),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "nothing to export for ['zzzzzz', 'vad']" in err and err.rstrip().endswith(". Did you mean 'vadd'?")


# --- argparse: no abbreviations; an unknown option is reported with the subcommand's usage; no ignored options ---


def _usage_error(capsys, *args: str) -> str:
    """stderr of `autotune ARGS` that argparse refused (exit 2)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(list(args))
    assert exited.value.code == 2, args
    out = capsys.readouterr()
    assert out.out == "", args
    return out.err


def test_no_option_is_taken_as_an_abbreviation_of_another(capsys):
    write_record(record("add_kernel", [1000]))
    err = _usage_error(capsys, "cache", "show", "add_kernel", "--remote")  # not --remote-url
    assert "autotune cache show: error: unrecognized arguments: --remote" in err and "expected one" not in err
    err = _usage_error(capsys, "cache", "list", "--kern", "add_kernel")  # not --kernel
    assert "autotune cache list: error: unrecognized arguments: --kern add_kernel" in err
    _usage_error(capsys, "report", "add_kernel", "--ke", "1000")
    _usage_error(capsys, "export", "a.tar.gz", "--kern", "add_kernel")
    parser = cli.build_parser()
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0]
    cache = subparsers.choices["cache"]
    nested = [a for a in cache._actions if isinstance(a, argparse._SubParsersAction)][0]
    everyone = [parser, *subparsers.choices.values(), *nested.choices.values()]
    assert [p.prog for p in everyone if p.allow_abbrev] == []


@pytest.mark.parametrize(
    "args, prog, unknown",
    [
        (["report", "add_kernel", "--remote"], "autotune report", "--remote"),
        (["cache", "list", "--key", "1000"], "autotune cache list", "--key 1000"),
        (["cache", "show", "add_kernel", "extra"], "autotune cache show", "extra"),
        (["export", "a.tar.gz", "--force"], "autotune export", "--force"),
    ],
)
def test_an_option_a_subcommand_does_not_take_is_reported_with_that_subcommand_s_usage(capsys, args, prog, unknown):
    err = _usage_error(capsys, *args)
    assert err.startswith(f"usage: {prog} [-h]"), err
    assert err.endswith(f"{prog}: error: unrecognized arguments: {unknown}\n"), err


def test_an_unknown_option_before_the_subcommand_is_the_top_level_s(capsys):
    err = _usage_error(capsys, "--bogus", "cache", "list")
    assert err.startswith("usage: autotune [-h] [--version] COMMAND") and "unrecognized arguments: --bogus" in err


def test_cache_path_refuses_remote_url_instead_of_ignoring_it(capsys, tmp_path):
    err = _usage_error(capsys, "cache", "path", "--remote-url", "redis://127.0.0.1:1/0")
    assert err.startswith("usage: autotune cache path [-h] [--cache-dir DIR]")
    assert "autotune cache path: error: unrecognized arguments: --remote-url redis://127.0.0.1:1/0" in err
    assert cli.main(["cache", "path", "--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path)
