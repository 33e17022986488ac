"""`autotune cache` on caches that are not as expected, in real subprocesses: keys of different shapes, a cache
directory that is a file or that this user cannot read, entries that cannot be removed, entries whose text would
drive the terminal or whose timestamp no clock can show, and a --key that is not a key.
Plus the library's one warning for a cache directory it cannot write."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest
from cache_files import write_record
from test_cache import DT, Tuner, new_cache
from test_cli import record, run_cli

from autotune import CacheWarning
from autotune.options import cache_dir
from autotune.storage import disk_entries

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534

# Run the CLI as another user: everything is imported while still root (the interpreter's own files may be
# readable by root only), then the process drops to `nobody` and runs the command.
AS_NOBODY = """
import contextlib, io, os, sys
from autotune.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["cache", "path"])
os.setgroups([]); os.setgid(%d); os.setuid(%d)
sys.exit(main(sys.argv[1:]))
""" % (NOBODY, NOBODY)  # noqa: UP031 (the script holds braces)


def run_cli_as_other_user(*args: str) -> subprocess.CompletedProcess:
    """The CLI as a user that does not own the cache: `nobody` when this is root, else this user (the tests then
    take permissions away with chmod, which a non-root user cannot ignore)."""
    if os.geteuid() != 0:
        return run_cli(*args)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    res = subprocess.run(
        [sys.executable, "-c", AS_NOBODY, *args], capture_output=True, text=True, env=env, timeout=120, cwd="/"
    )
    if "PermissionError" in res.stderr and "setuid" in res.stderr:
        pytest.skip("this root cannot switch to user nobody (no CAP_SETUID); the check needs another user")
    return res


@pytest.fixture
def public_dir():
    """A directory every user can reach (pytest's tmp_path lies under a directory private to this user)."""
    path = Path(tempfile.mkdtemp(prefix="autotune-test-"))
    path.chmod(0o755)
    yield path
    for p in [path, *path.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(path)


@contextmanager
def undeletable(directory: Path):
    """Files in `directory` cannot be removed: `chattr +i` as root (which ignores permission bits), chmod 0555
    otherwise. Yields the error text a removal gets."""
    if os.geteuid() != 0:
        os.chmod(directory, 0o555)
        try:
            yield "Permission denied"
        finally:
            os.chmod(directory, 0o755)
        return
    res = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(
            f"root ignores permission bits and `chattr +i` is not supported here ({res.stderr.strip()}): "
            "no way to make a file undeletable for root"
        )
    try:
        yield "Operation not permitted"
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


# ---------------------------------------------------------------------------------------------- sorting


def test_list_and_show_sort_keys_of_different_shapes():
    for key in ([40], [[40]], ["row"], [None], [1.5], [[40, "x"]], [True], []):
        write_record(record("add", key))
    res = run_cli("cache", "list")
    assert res.returncode == 0 and "8 entries" in res.stdout, res.stderr
    keys = [line.split()[1] for line in res.stdout.splitlines()[2:10]]
    assert keys.index("[1.5]") < keys.index("[40]") < keys.index('["row"]') < keys.index("[[40]]")
    res = run_cli("cache", "show", "add")
    assert res.returncode == 0 and res.stdout.count("add  key=") == 8, res.stderr


# ---------------------------------------------------------------------------------------------- the directory


def test_a_file_given_as_the_cache_directory_is_an_error_not_an_empty_cache(tmp_path):
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    for args in (["list"], ["show", "add"], ["clear"], ["clear", "--kernel", "add"], ["push"], ["pull"]):
        res = run_cli("cache", *args, "--cache-dir", str(a_file))
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert f"{a_file} (--cache-dir) is not a directory" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("cache", "list", cache=str(a_file))  # from the environment: named as such
    assert res.returncode == 2 and "(AUTOTUNE_CACHE_DIR) is not a directory" in res.stderr


def test_a_file_given_as_the_cache_directory_is_refused_by_report_export_import_and_precompile(tmp_path):
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    triton = ["--triton-cache-dir", str(tmp_path / "triton")]
    for args in (
        ["report", "add"],
        ["export", str(tmp_path / "a.tar.gz"), *triton],
        ["import", str(tmp_path / "a.tar.gz"), *triton],
        ["precompile", "kernels.vector_add:add_kernel", "--winners-only", "--signature", "x=*fp32"],
    ):
        res = run_cli(*args, "--cache-dir", str(a_file))
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert (
            res.stderr == f"autotune {args[0]}: the cache directory {a_file} (--cache-dir) is not a directory; "
            "pass --cache-dir a directory\n"
        ), (args, res.stderr)  # no raw CacheWarning, no source line
    assert not (tmp_path / "a.tar.gz").exists()


def test_an_explicit_cache_dir_that_does_not_exist_is_said_not_listed_as_an_empty_cache(tmp_path):
    """--cache-dir /nope (a typo, most often) on a command that reads the cache: "does not exist", exit 2, as a file
    given as the directory is. The default directory not existing yet is an empty cache, as before; a --cache-dir a
    command writes into (`pull`, `import`) is made."""
    nope = tmp_path / "nope"
    triton = ["--triton-cache-dir", str(tmp_path / "triton")]
    for args in (
        ["cache", "list"],
        ["cache", "list", "--kernel", "add"],
        ["cache", "show", "add"],
        ["cache", "clear"],
        ["cache", "push", "--remote-url", "redis://127.0.0.1:1/0"],
        ["report", "add"],
        ["export", str(tmp_path / "a.tar.gz"), *triton],
    ):
        res = run_cli(*args, "--cache-dir", str(nope))
        assert res.returncode == 2 and res.stdout == "", (args, res.stdout, res.stderr)
        command = " ".join(args[:2]) if args[0] == "cache" else args[0]
        assert res.stderr.startswith(
            f"autotune {command}: no entries: the cache directory {nope} (--cache-dir) does not exist"
        ), (args, res.stderr)
    assert not nope.exists() and not (tmp_path / "a.tar.gz").exists()
    res = run_cli("cache", "list", cache=str(nope))  # the configured one, not there yet
    assert res.returncode == 0 and res.stdout.strip() == f"no entries in {nope}", res.stderr
    res = run_cli("cache", "pull", "--cache-dir", str(nope))  # a target: past the directory check
    assert res.returncode == 2 and "AUTOTUNE_REMOTE_CACHE" in res.stderr and "does not exist" not in res.stderr


def test_a_cache_directory_this_user_cannot_read_is_an_error_not_an_empty_cache(public_dir):
    directory = public_dir / "private"
    write_record(record("add", [40]), directory)
    directory.chmod(0o700 if os.geteuid() == 0 else 0o000)
    try:
        for args in (["list"], ["show", "add"], ["clear"], ["clear", "--kernel", "add"]):
            res = run_cli_as_other_user("cache", *args, "--cache-dir", str(directory))
            assert res.returncode == 2, (args, res.stdout, res.stderr)
            assert f"cannot read the cache directory {directory}" in res.stderr and "Permission denied" in res.stderr
    finally:
        directory.chmod(0o755)
    assert len(disk_entries(directory=directory)) == 1


def test_a_kernel_directory_this_user_cannot_read_is_listed_as_unusable(public_dir):
    directory = public_dir / "shared"
    path = write_record(record("add", [40]), directory)
    write_record(record("mul", [40]), directory)
    directory.chmod(0o755)
    path.parent.chmod(0o700 if os.geteuid() == 0 else 0o000)
    try:
        res = run_cli_as_other_user("cache", "list", "--cache-dir", str(directory))
    finally:
        path.parent.chmod(0o755)
    assert res.returncode == 0, res.stderr
    assert "1 entry, 1 unusable" in res.stdout and "cannot list the directory" in res.stdout, res.stdout


def test_entries_that_cannot_be_removed_are_reported_with_a_non_zero_exit():
    paths = [write_record(record("add", key)) for key in ([40], [64])]
    with undeletable(paths[0].parent) as reason:
        res = run_cli("cache", "clear", "--kernel", "add")
        assert res.returncode == 1, res.stdout + res.stderr
        assert (
            f"found 2 entries (kernel 'add') in {cache_dir()}, removed 0, could not remove 2 ({reason})" in res.stderr
        ), res.stderr
        assert str(paths[0]) in res.stderr
        res = run_cli("cache", "clear")
        assert res.returncode == 1 and "could not remove 2" in res.stderr, res.stderr
    assert len(disk_entries()) == 2
    res = run_cli("cache", "clear")
    assert res.returncode == 0 and "removed 2 entries" in res.stdout


def test_a_cache_directory_this_process_cannot_write_costs_one_warning_naming_the_fix():
    root = Path(cache_dir())
    root.mkdir(parents=True)
    kc = new_cache()
    with undeletable(root):  # nothing can be created in it either
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for key in ((1,), (2,), (3,)):
                assert kc.get_or_tune(key, DT, Tuner(key))[1] == "tuned"
            assert new_cache().get_or_tune((4,), DT, Tuner((4,)))[1] == "tuned"  # another kernel: same fault
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) == 1, messages
    assert str(root) in messages[0] and "point autotune_cache_dir at a writable directory" in messages[0].lower()
    assert kc.get_or_tune((1,), DT, Tuner((1,)))[1] == "memory"


# ---------------------------------------------------------------------------------------------- hostile text


def test_show_and_list_survive_a_far_future_timestamp_and_escape_control_characters():
    future = write_record(record("add", [41]))
    data = json.loads(future.read_text())
    data["timestamp"] = 1e20  # schema-valid; no clock can show it, and refused as dated ahead (#40 item 13)
    future.write_text(json.dumps(data))
    path = write_record(record("add", [40]))
    data = json.loads(path.read_text())
    data["timestamp"] = 1e9  # 2001: shown as a date
    data["dtypes"] = ["\x1b]0;pwned\x07\x1b[2J", "torch.float32"]
    data["device"] = "gpu\x1b[31m\u202e"
    data["trials"][-1]["error"] = "boom \x1b[1mbold\x9b"
    path.write_text(json.dumps(data))
    for args in (["show", "add"], ["list"]):
        res = run_cli("cache", *args)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        out = res.stdout + res.stderr
        assert not any(ch in out for ch in "\x1b\x07\x9b\u202e"), repr(out)
        assert "\\x1b]0;pwned\\x07" in out and "gpu\\x1b[31m\\u202e" in out
    res = run_cli("cache", "show", "add")
    assert "timestamp 1e+20 (out of range), over 24 hours ahead" in res.stdout, res.stdout
    assert "boom \\x1b[1mbold\\x9b" in res.stdout
    res = run_cli("report", "add")  # the report's table shows the same fields
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert not any(ch in res.stdout + res.stderr for ch in "\x1b\x07\x9b\u202e"), repr(res.stdout)


# ---------------------------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("args", [["clear", "--kernel", "add", "--key", ""], ["show", "add", "--key", " "]])
def test_an_empty_key_is_a_usage_error_not_a_traceback(args):
    write_record(record("add", [40]))
    res = run_cli("cache", *args)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"autotune cache {args[0]}: --key ''") and "4096,1024" in res.stderr
    assert len(disk_entries()) == 1


@pytest.mark.parametrize("text", ["(40,", "[40", "40)"])
def test_a_key_meant_as_a_tuple_but_unclosed_is_a_usage_error_not_a_string_key(text):
    """`--key "(40,"` used to clear the key ("(40",): nothing matched, and a typo read as a request."""
    write_record(record("add", [40]))
    res = run_cli("cache", "clear", "--kernel", "add", "--key", text)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "is not a valid tuple or list" in res.stderr and "4096,1024" in res.stderr
    assert len(disk_entries()) == 1


def test_cache_clear_names_the_unusable_files_it_leaves(capsys):
    """A clear removes only files that read as entries (a truncated file is not known to be one), so the
    unusable files `cache list` flags stay: `cache clear` says which, instead of "removed 1 entry" alone."""
    from autotune.cli import main

    good = write_record(record("vadd", [1024]))
    truncated = good.with_name("0" * 32 + ".json")
    truncated.write_text(good.read_text()[:40])
    assert main(["cache", "list"]) == 0 and "1 entry, 1 unusable" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 entry (all kernels)" in out
    assert "1 unusable file stays (a clear removes only files that read as entries" in out and str(truncated) in out
    assert truncated.exists() and [e.path for e in disk_entries()] == [truncated]
    # a kernel whose only files are unusable: said as such (exit 0), not "nothing matched ... Did you mean"
    assert main(["cache", "clear", "--kernel", "vadd"]) == 0
    captured = capsys.readouterr()
    assert "removed 0 entries (kernel 'vadd')" in captured.out and str(truncated) in captured.out
    assert captured.err == ""
