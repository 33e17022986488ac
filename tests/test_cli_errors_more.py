"""More command-line mistakes and faults, in real subprocesses: a --key no key can hold (NaN, an infinity, nesting
deeper than any key), an empty path option, a kernel name that is not UTF-8, the Redis tier's warnings, --json
when nothing matches, a crash note only a short name reaches, `autotune sweep`'s options and faults, the remote
list's order, an unknown option between `cache` and its subcommand, and `pull` into a kernel directory that is a
file."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cache_files import write_record
from test_cli import record
from test_cli_cache_journal import DTYPES, KERNEL_ID, note_of_a_dead_process
from test_cli_hostile import one_line_mistake

from autotune.cli import main
from autotune.cli.arguments import checked_cache_dir
from autotune.keyspec import parse_key
from autotune.options import cache_dir
from autotune.storage import disk_entries, journal

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
NO_REDIS = ["--remote-url", "redis://127.0.0.1:1/0"]  # never reached: each mistake is found before


def run_cli(*args: str | bytes, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=full, timeout=300, cwd=str(cwd)
    )


def no_traceback(res: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in res.stderr, res.stderr


# ---------------------------------------------------------------------------------------------- --key


@pytest.mark.parametrize(
    "text",
    ["NaN", "Infinity", "-Infinity", "1e999", "4,NaN", "(1, -1e999)", "[" * 900 + "]" * 900, "[" * 2000 + "]" * 2000],
    ids=["nan", "inf", "-inf", "1e999", "list-nan", "tuple-inf", "deep", "deeper"],
)
def test_a_key_no_entry_can_have_is_a_value_error_naming_key(text):
    with pytest.raises(ValueError, match="--key"):
        parse_key(text)


def test_nesting_a_key_can_have_and_the_bare_words_inf_and_nan_are_read_as_before():
    assert parse_key("(1, (2, (3, 4)))") == (1, (2, (3, 4)))
    assert parse_key("inf") == ("inf",) and parse_key("nan,1") == ("nan", 1)  # bare strings, as any other word


@pytest.mark.parametrize(
    "args",
    [
        ["cache", "clear", "--kernel", "K", "--key", "NaN"],
        ["cache", "clear", "--kernel", "K", "--key", "Infinity", "--remote", *NO_REDIS],
        ["cache", "show", "K", "--key", "1e999"],
        ["cache", "show", "K", "--key", "[" * 900 + "]" * 900],
        ["cache", "show", "K", "--key", "[" * 2000 + "]" * 2000],
        ["report", "K", "--key", "NaN"],
    ],
    ids=["clear-nan", "clear-remote-inf", "show-1e999", "show-deep", "show-deeper", "report-nan"],
)
def test_a_key_of_nan_an_infinity_or_deep_nesting_is_a_usage_error_naming_key(args):
    write_record(record("K", [1]))
    one_line_mistake(run_cli(*args), "--key")
    assert len(disk_entries("K")) == 1  # nothing was cleared


# ---------------------------------------------------------------------------------------------- empty paths


@pytest.mark.parametrize(
    "args",
    [
        ["cache", "clear", "--cache-dir", ""],
        ["cache", "list", "--cache-dir="],
        ["cache", "path", "--cache-dir", ""],
        ["report", "K", "--csv", ""],
        ["report", "K", "--json", ""],
        ["sweep", "sweep_kernels:sweep_pick", "--calls", "sweep_kernels:cli_pick_calls", "--json", ""],
        ["sweep", "sweep_kernels:sweep_pick", "--calls", "sweep_kernels:cli_pick_calls", "--cache-dir", ""],
    ],
)
def test_an_empty_path_option_is_a_usage_error_not_the_option_left_out(args):
    write_record(record("K", [1]))
    res = run_cli(*args)
    assert res.returncode == 2 and "empty path" in res.stderr and "argument --" in res.stderr, res.stderr
    assert len(disk_entries("K")) == 1 and not list(REPO.glob("report*.csv"))  # the default cache: untouched


def test_checked_cache_dir_without_a_cache_dir_is_the_default_one():
    assert checked_cache_dir(argparse.Namespace(cache_dir=None), "cache list") == cache_dir()


# ---------------------------------------------------------------------------------------------- kernel names


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["cache", "show", b"\xff"], "argument KERNEL"),
        (["report", b"\xff"], "argument KERNEL"),
        (["cache", "list", "--kernel", b"\xff"], "argument --kernel"),
        (["cache", "clear", "--kernel", b"\xff"], "argument --kernel"),
        (["cache", "list", "--remote", *NO_REDIS, "--kernel", b"\xff"], "argument --kernel"),
        (["cache", "pull", *NO_REDIS, "--kernel", b"\xff"], "argument --kernel"),
    ],
)
def test_a_kernel_name_that_is_not_utf8_is_a_usage_error_naming_the_argument(args, named):
    write_record(record("K", [1]))
    res = run_cli(*args)
    assert res.returncode == 2 and named in res.stderr and "not UTF-8" in res.stderr, res.stderr
    no_traceback(res)
    assert len(disk_entries("K")) == 1


# ---------------------------------------------------------------------------------------------- --json


def test_list_json_of_a_kernel_that_matches_nothing_exits_1_as_the_text_does():
    write_record(record("vadd", [1]))
    text, js = run_cli("cache", "list", "--kernel", "vad"), run_cli("cache", "list", "--kernel", "vad", "--json")
    assert text.returncode == js.returncode == 1, js.stdout + js.stderr
    assert js.stderr == text.stderr and "no entries for kernel 'vad'" in js.stderr and "'vadd'" in js.stderr
    assert json.loads(js.stdout) == []  # still JSON, for a script
    assert run_cli("cache", "list", "--json", "--kernel", "vadd").returncode == 0


# ---------------------------------------------------------------------------------------------- crash notes


def test_a_clear_by_short_name_forgets_the_crash_note_of_a_first_tuning_that_left_no_entry(capsys):
    note_of_a_dead_process(KERNEL_ID, (1,))
    assert main(["cache", "list", "--kernel", "add"]) == 0
    assert "CRASHED CONFIG" in capsys.readouterr().out
    assert main(["cache", "clear", "--kernel", "add"]) == 0
    assert "forgot 1 crash note" in capsys.readouterr().out
    assert journal.crashed(KERNEL_ID, (1,), DTYPES) == {}
    assert main(["cache", "list", "--kernel", "add"]) == 1  # neither entry nor note is left


# ---------------------------------------------------------------------------------------------- parsing


def test_an_unknown_option_between_cache_and_its_subcommand_is_cache_s(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["cache", "--bogus", "list"])
    assert exit_.value.code == 2
    assert "autotune cache: error: unrecognized arguments: --bogus" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- sweep

SWEEP = ["sweep", "sweep_kernels:sweep_pick", "--calls", "sweep_kernels:cli_pick_calls", "--workers", "1"]


def test_sweep_writes_its_winners_to_cache_dir(tmp_path):
    res = run_cli(*SWEEP, "--cache-dir", str(tmp_path / "elsewhere"))
    assert res.returncode == 0, res.stderr
    assert len(disk_entries("sweep_pick", tmp_path / "elsewhere")) == 2
    assert disk_entries("sweep_pick") == []  # not AUTOTUNE_CACHE_DIR's


def test_sweep_refuses_a_file_given_as_cache_dir(tmp_path):
    (tmp_path / "file").write_text("")
    one_line_mistake(run_cli(*SWEEP, "--cache-dir", str(tmp_path / "file")), "--cache-dir", "is not a directory")


def test_sweep_of_a_module_that_raises_as_it_is_imported_names_it(tmp_path):
    (tmp_path / "badmod.py").write_text("raise RuntimeError('boom at import')\n")
    res = run_cli("sweep", "badmod:k", "--calls", "sweep_kernels:cli_pick_calls", cwd=tmp_path)
    one_line_mistake(res, "KERNEL 'badmod:k': importing it raised RuntimeError: boom at import")


def test_sweep_of_calls_that_yield_then_raise_names_them(tmp_path):
    (tmp_path / "gencalls.py").write_text("def calls():\n    yield 1 / 0\n")
    res = run_cli("sweep", "sweep_kernels:sweep_pick", "--calls", "gencalls:calls", cwd=tmp_path)
    one_line_mistake(res, "--calls 'gencalls:calls'", "ZeroDivisionError")


@pytest.mark.parametrize(
    ("kernel", "said"),
    [
        ("kernels_for_tests:add_kernel", "KERNEL 'kernels_for_tests:add_kernel' is a plain @triton.jit kernel"),
        ("notkernels:number", "KERNEL 'notkernels:number' is an object of type int, not a kernel"),
    ],
    ids=["plain-jit", "number"],
)
def test_sweep_of_something_not_an_autotune_kernel_says_so_in_the_cli_s_words(tmp_path, kernel, said):
    (tmp_path / "notkernels.py").write_text("number = 5\n")
    res = run_cli("sweep", kernel, "--calls", "sweep_kernels:cli_pick_calls", cwd=tmp_path)
    one_line_mistake(res, said)
    assert "sweep()" not in res.stderr and " at 0x" not in res.stderr, res.stderr


def test_sweep_of_calls_that_make_no_arguments_is_refused_before_any_worker_starts(tmp_path):
    (tmp_path / "nocalls.py").write_text("def calls():\n    return []\n")
    res = run_cli(*SWEEP[:2], "--calls", "nocalls:calls", "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    one_line_mistake(res, "--calls 'nocalls:calls' returned no argument makers")
    assert res.stdout == "", res.stdout  # no report: no worker ran


@pytest.mark.parametrize(
    ("args", "said", "not_said"),
    [
        (["--workers", "0"], "argument --workers", "sweep(workers"),
        (["--ray", "locl"], "--ray locl", "sweep(executor"),
    ],
)
def test_sweep_s_option_mistakes_name_the_option_not_the_python_argument(args, said, not_said):
    res = run_cli("sweep", "sweep_kernels:sweep_pick", "--calls", "sweep_kernels:cli_pick_calls", *args)
    assert res.returncode == 2 and said in res.stderr and not_said not in res.stderr, res.stderr
    no_traceback(res)


@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="needs Linux's /proc")
def test_sweep_that_cannot_write_json_still_exports_and_exits_1(tmp_path):
    archive = tmp_path / "sweep.tar.gz"
    res = run_cli(*SWEEP, "--json", "/proc/version", "--export", str(archive))
    assert res.returncode == 1, res.stdout + res.stderr
    no_traceback(res)
    assert "--json /proc/version could not be written" in res.stderr, res.stderr
    assert archive.is_file() and f"wrote {archive}" in res.stdout, res.stdout


# ---------------------------------------------------------------------------------------------- replay


def test_replay_caps_the_budget_at_the_configs_the_landscape_recorded(tmp_path, capsys):
    from test_reporting_edges import entry, landscape_file

    cache = {str(a): entry(a, float(a)) for a in (1, 2, 3, 4)}
    path = landscape_file(tmp_path / "small.json", cache, tune_params={"a": [1, 2, 3, 4]})
    out_json = tmp_path / "replay.json"
    args = ["replay", str(path), "--strategy", "random", "--budget", "1000", "--workers", "256", "--seeds", "2"]
    assert main([*args, "--json", str(out_json)]) == 0
    assert "strategy random, budget 4, 256 compile workers" in capsys.readouterr().out
    result = json.loads(out_json.read_text())
    assert result["budget"] == 4 and all(r["evaluations"] == 4 for r in result["runs"]), result


def test_a_random_search_draws_only_for_the_untried_configs_of_a_listed_space(monkeypatch):
    """Asked for many configs (one per simulated worker) once a listed space is (nearly) all tried, a strategy
    draws for the configs left, not 50 times the number asked."""
    from autotune.engine.search import RandomSearch
    from autotune.space import CartesianSpace

    space = CartesianSpace(a=[1, 2, 3])
    search = RandomSearch(space, seed=0)
    assert len(search.ask(1)) == 1
    draws = [0]
    real = CartesianSpace.sample

    def counted(self, rng):
        draws[0] += 1
        return real(self, rng)

    monkeypatch.setattr(CartesianSpace, "sample", counted)
    assert len(search.ask(256)) == 2
    assert draws[0] <= 2 * 50, draws
    draws[0] = 0
    assert search.ask(256) == [] and draws[0] == 0


# ---------------------------------------------------------------------------------------------- Redis


@pytest.fixture
def pushed(redis_server, tmp_path):
    """A Redis holding vadd's entries of keys 8, 256, 1000 and 1024, and one key that is no entry, whose name would
    drive the terminal; its URL."""
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'autotune[redis]')")
    for n in (1024, 8, 1000, 256):
        write_record(record("vadd", [n]), tmp_path / "node")
    assert (
        run_cli("cache", "push", "--cache-dir", str(tmp_path / "node"), "--remote-url", redis_server.url).returncode
        == 0
    )
    redis_server.client().set("autotune:entry:vadd:bad\x1b]0;pwned\x07", "{}")
    return redis_server.url


@pytest.mark.parametrize(
    "args",
    [["list"], ["list", "--kernel", "nope"], ["clear", "--kernel", "nope"]],
    ids=["list", "list-no-match", "clear"],
)
def test_remote_list_and_clear_say_the_tier_s_warnings_escaped_as_their_own(pushed, args):
    res = run_cli("cache", *args, "--remote", "--remote-url", pushed)
    assert "\x1b" not in res.stderr and "\\x1b]0;pwned\\x07" in res.stderr, res.stderr
    assert "CacheWarning" not in res.stderr and "runpy" not in res.stderr, res.stderr
    assert f"autotune cache {args[0]}: refused a record from Redis" in res.stderr, res.stderr


def test_remote_list_json_of_a_kernel_that_matches_nothing_exits_1(pushed):
    res = run_cli("cache", "list", "--remote", "--remote-url", pushed, "--kernel", "vad", "--json")
    assert res.returncode == 1 and json.loads(res.stdout) == [], res.stdout + res.stderr
    assert "no entries for kernel 'vad'" in res.stderr and "'vadd'" in res.stderr, res.stderr


def test_remote_list_orders_keys_by_value_as_the_disk_list(pushed):
    res = run_cli("cache", "list", "--remote", "--remote-url", pushed, "--kernel", "vadd")
    keys = [line.split()[1] for line in res.stdout.splitlines()[2:6]]
    assert keys == ["[8]", "[256]", "[1000]", "[1024]"], res.stdout


def test_pull_into_a_kernel_directory_that_is_a_file_says_the_lock_could_not_be_taken(pushed, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "vadd").write_text("")
    res = run_cli("cache", "pull", "--remote-url", pushed, "--kernel", "vadd", "--cache-dir", str(target))
    assert res.returncode == 1, res.stdout + res.stderr
    copy_line = next(line for line in res.stderr.splitlines() if "could not be copied" in line)
    assert "4 entries could not be copied" in copy_line and "cannot lock" in copy_line, res.stderr
    assert "could not be taken" in copy_line and "stayed held" not in copy_line, copy_line
    assert "once the tuning is done" not in copy_line and "in memory only" not in copy_line, copy_line
    assert "refused a record" not in copy_line and "refused a record" in res.stderr, res.stderr  # said on its own
