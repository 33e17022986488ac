"""The compile helper processes a precompile under the interpreter compiles in (`aot/subprocess_compilers.py`):
one interrupted mid-request is never asked again, and one that imported a kernel before its source was edited is
replaced. Each test runs a script in a fresh process, against kernel modules it writes itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

KERNEL = """
import os, time
os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("TRITON_INTERPRET") == "0" and {slow}:  # in a compile helper: a compile that takes a while
    open(__file__ + ".compiling", "w").close()
    time.sleep(60)
import triton, triton.language as tl
from autotune import autotune

@triton.jit
def {name}(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) * {factor}, mask=offs < n)

tuned = autotune(space={{"BLOCK": {blocks}}}, key=["n"], grid="(cdiv(n, $BLOCK),)")({name})
"""


def _write_kernel(directory: Path, module: str, *, name: str, factor: str = "2.0", slow: bool = False, blocks=(64,)):
    (directory / f"{module}.py").write_text(KERNEL.format(name=name, factor=factor, slow=slow, blocks=tuple(blocks)))


def _run(tmp_path: Path, body: str) -> dict:
    script = "import os, sys, json, glob, importlib\n" + textwrap.dedent(body)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path)]),
        TRITON_INTERPRET="1",
        TRITON_CACHE_DIR=str(tmp_path / "triton-cache"),
        AUTOTUNE_CACHE_DIR=str(tmp_path / "cache"),
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


SIG = '{"x": "*fp32", "out": "*fp32", "n": "i32:16"}'


def test_a_helper_interrupted_mid_compile_is_never_asked_again(tmp_path):
    """Ctrl-C while a helper compiles: that helper is killed, not put back idle with its reply still to come (the
    next request would read it: another kernel's binary under this config's name)."""
    _write_kernel(tmp_path, "slow_mod", name="slow_kernel", slow=True)
    _write_kernel(tmp_path, "fast_mod", name="fast_kernel", blocks=(64, 128))
    got = _run(
        tmp_path,
        f"""
        import signal, threading, time
        from autotune import precompile
        import slow_mod, fast_mod
        def interrupt_once_the_helper_compiles():
            while not os.path.exists(slow_mod.__file__ + ".compiling"):
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt_once_the_helper_compiles, daemon=True).start()
        try:
            precompile(slow_mod.tuned, signature={SIG}, targets="cuda:90", workers=0)
        except KeyboardInterrupt:
            pass
        report = precompile(fast_mod.tuned, signature={SIG}, targets="cuda:90", workers=0)
        print(json.dumps({{str(c.config["BLOCK"]): sorted(os.listdir(c.path)) for c in report.compiled}}))
        """,
    )
    assert set(got) == {"64", "128"}
    assert all("fast_kernel.cubin" in files and "slow_kernel.cubin" not in files for files in got.values()), got


def _recompiled_after_edit(tmp_path, module: str, factor_text: str) -> dict:
    """Precompile `module`'s kernel, edit `factor_text` to multiply by 7.0, reload and precompile again (workers=0,
    so one helper serves both): whether the hash stayed the same, and whether the new binary multiplies by 7."""
    edited = factor_text.replace("2.0", "7.0")
    return _run(
        tmp_path,
        f"""
        from autotune import precompile
        import {module}
        before = precompile({module}.tuned, signature={SIG}, targets="cuda:90", workers=0).compiled[0]
        source = open({module}.__file__).read().replace("{factor_text}", "{edited}")
        open({module}.__file__, "w").write(source)
        importlib.reload({module})
        after = precompile({module}.tuned, signature={SIG}, targets="cuda:90", workers=0).compiled[0]
        ttir = open(glob.glob(os.path.join(after.path, "*.ttir"))[0]).read()
        print(json.dumps({{"same": before.hash == after.hash, "seven": "7.000000e+00" in ttir}}))
        """,
    )


def test_a_helper_that_imported_a_kernel_before_it_was_edited_compiles_the_edited_source(tmp_path):
    _write_kernel(tmp_path, "edited_mod", name="edited_kernel", factor="2.0")
    assert _recompiled_after_edit(tmp_path, "edited_mod", "* 2.0") == {"same": False, "seven": True}


def test_a_compile_error_whose_text_reads_like_a_device_error_is_that_config_s_alone(tmp_path):
    """A static_assert message mentioning an "illegal memory access" is one config's compile error, not a poisoned
    device (no device is involved in a precompile): the other configs are still compiled."""
    (tmp_path / "guarded_mod.py").write_text(
        textwrap.dedent("""
        import os
        os.environ.setdefault("TRITON_INTERPRET", "1")
        import triton, triton.language as tl
        from autotune import autotune

        @triton.jit
        def guarded_kernel(x, out, n, BLOCK: tl.constexpr):
            tl.static_assert(BLOCK <= 128, "BLOCK > 128 would make an illegal memory access")
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

        tuned = autotune(space={"BLOCK": (64, 128, 256)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(guarded_kernel)
        """)
    )
    got = _run(
        tmp_path,
        f"""
        from autotune import precompile
        import guarded_mod
        report = precompile(guarded_mod.tuned, signature={SIG}, targets="cuda:90", workers=2)
        print(json.dumps({{"compiled": sorted(c.config["BLOCK"] for c in report.compiled),
                          "failed": [(f.config["BLOCK"], f.kind) for f in report.failed]}}))
        """,
    )
    assert got == {"compiled": [64, 128], "failed": [[256, "compile_error"]]}


def test_a_listener_installed_over_ours_that_chains_back_is_called_once_not_forever():
    from triton import knobs

    from autotune.aot.events import LISTENER

    saved = knobs.compilation.listener, LISTENER.previous
    LISTENER.install()
    ours, calls = knobs.compilation.listener, []

    def users_listener(**event):  # a user's listener, chaining to the one it found: ours
        calls.append(event)
        ours(**event)

    knobs.compilation.listener = users_listener
    try:
        events = LISTENER.capture()  # a later precompile installs ours again, keeping the user's as `previous`
        knobs.compilation.listener(src=None, metadata={"hash": "h"}, metadata_group={}, times=None, cache_hit=False)
        assert len(calls) == 1 and events == [("h", False)]
    finally:
        LISTENER.release()
        knobs.compilation.listener, LISTENER.previous = saved


def test_a_compile_past_timeout_s_or_interrupted_has_its_helper_killed(tmp_path):
    """timeout_s is enforced by killing the helper compiling that config (it compiled on for minutes, and more
    helpers were started beside it); Ctrl-C kills the helpers in flight too, so it returns at once."""
    (tmp_path / "hanging_mod.py").write_text(
        KERNEL.format(name="hanging_kernel", factor="2.0", slow=False, blocks=(64,)).replace(
            "import triton,",
            'if os.environ.get("TRITON_INTERPRET") == "0":  # a helper: note its pid, then hang\n'
            '    open(os.path.join(os.environ["PIDS"], str(os.getpid())), "w").close()\n'
            "    time.sleep(600)\n"
            "import triton,",
        )
    )
    (tmp_path / "pids").mkdir()
    got = _run(
        tmp_path,
        f"""
        import signal, threading, time
        os.environ["PIDS"] = {str(tmp_path / "pids")!r}
        from autotune import precompile
        import hanging_mod
        report = precompile(hanging_mod.tuned, signature={SIG}, targets=["cuda:90", "cuda:80"], workers=2, timeout_s=3)
        timed_out = sorted(f.kind for f in report.failed)
        started = len(os.listdir(os.environ["PIDS"]))
        def interrupt_once_the_helper_compiles():
            while len(os.listdir(os.environ["PIDS"])) == started:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt_once_the_helper_compiles, daemon=True).start()
        began = time.monotonic()
        try:
            precompile(hanging_mod.tuned, signature={SIG}, targets=["cuda:70"], workers=2)
        except KeyboardInterrupt:
            interrupted_after = time.monotonic() - began
        pids = [int(name) for name in os.listdir(os.environ["PIDS"])]
        deadline = time.monotonic() + 30
        def alive(pid):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            return open(f"/proc/{{pid}}/stat").read().split()[2] != "Z"  # a zombie is dead
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        print(json.dumps({{"timed_out": timed_out, "interrupted_after": interrupted_after, "helpers": len(pids),
                          "alive": [pid for pid in pids if alive(pid)]}}))
        """,
    )
    assert got["timed_out"] == ["timeout", "timeout"] and got["helpers"] >= 3
    assert got["interrupted_after"] < 60 and got["alive"] == [], got  # the helpers sleep 600 s


def test_a_timeout_with_no_pool_is_refused_before_anything_compiles():
    import pytest

    from autotune.aot.call_checks import check_timeout
    from autotune.errors import PrecompileError

    with pytest.raises(PrecompileError, match=r"workers=0 .*cannot be given up on; give workers=1 or more"):
        check_timeout(5, workers=0)
    check_timeout(5, workers=1)
    check_timeout(None, workers=0)


def test_the_summary_says_where_configs_compiled_one_at_a_time():
    from autotune.aot.report import PrecompileReport

    def summary(**fields) -> str:
        return PrecompileReport(kernel="k", targets=["cuda:90"], **fields).summary()

    assert summary(workers=0, processes=True).endswith(", 1 helper process")  # it said "0 helper processes"
    assert summary(workers=0, processes=False).endswith(", on the calling thread")
    assert summary(workers=4, processes=True).endswith(", 4 helper processes")
    assert summary(workers=4, processes=False).endswith(", 4 workers")


def test_a_helper_s_start_up_is_not_counted_against_a_compile_s_timeout(tmp_path):
    """timeout_s counts a compile from when its helper is ready: a helper whose start-up (its imports; here slowed to
    8 s by a sitecustomize) takes longer than timeout_s still compiles every config (it timed out each, starting
    a new cold helper each time)."""
    (tmp_path / "sitecustomize.py").write_text(
        'import os, time\nif os.environ.get("TRITON_INTERPRET") == "0":  # a compile helper starting\n    time.sleep(8)\n'
    )
    _write_kernel(tmp_path, "plain_mod", name="plain_kernel", blocks=(64, 128))
    got = _run(
        tmp_path,
        f"""
        from autotune import precompile
        import plain_mod
        report = precompile(plain_mod.tuned, signature={SIG}, targets="cuda:90", workers=1, timeout_s=5)
        print(json.dumps({{"compiled": sorted(c.config["BLOCK"] for c in report.compiled),
                          "failed": [f.error for f in report.failed]}}))
        """,
    )
    assert got == {"compiled": [64, 128], "failed": []}


def test_a_compile_past_its_timeout_has_its_ptxas_killed_too(tmp_path):
    """A timed-out compile kills the helper's whole process group: the ptxas it was waiting for (here one that
    hangs) does not run on after precompile returns. The failure names precompile's own timeout_s."""
    from fake_gpu import hanging_ptxas

    fake = hanging_ptxas(tmp_path, f"echo $$ > {tmp_path / 'ptxas.pid'}")  # every compile hangs, noting its pid
    _write_kernel(tmp_path, "ptx_mod", name="ptx_kernel")
    got = _run(
        tmp_path,
        f"""
        import time
        os.environ["TRITON_PTXAS_PATH"] = os.environ["TRITON_PTXAS_BLACKWELL_PATH"] = {str(fake)!r}
        from autotune import precompile
        import ptx_mod
        report = precompile(ptx_mod.tuned, signature={SIG}, targets="cuda:80", workers=1, timeout_s=3)
        pid = int(open({str(tmp_path / "ptxas.pid")!r}).read())
        def alive(pid):
            try:
                return open(f"/proc/{{pid}}/stat").read().split()[2] != "Z"  # a zombie is dead
            except FileNotFoundError:
                return False
        deadline = time.monotonic() + 30
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        print(json.dumps({{"failed": [(f.kind, f.error) for f in report.failed], "ptxas_alive": alive(pid)}}))
        if alive(pid):
            os.kill(pid, 9)
        """,
    )
    assert got["failed"] == [
        ["timeout", "compiling took longer than timeout_s=3 (--timeout): its compile helper process (and its ptxas) "
         "was killed"]
    ]  # fmt: skip
    assert got["ptxas_alive"] is False


def test_after_an_edit_every_idle_helper_with_the_old_source_is_replaced(tmp_path):
    """Two idle helpers imported the kernel before its edit: the first asked replies "stale" and the retry must not
    take the second (which is stale too, and made precompile tell a user who did reload to reload)."""
    _write_kernel(tmp_path, "twice_mod", name="twice_kernel", factor="2.0", blocks=(64, 128))
    got = _run(
        tmp_path,
        f"""
        from autotune import precompile
        from autotune.aot.subprocess_compilers import HELPERS
        import twice_mod
        precompile(twice_mod.tuned, signature={SIG}, targets="cuda:90", workers=2)
        source = open(twice_mod.__file__).read().replace("* 2.0", "* 7.0")
        open(twice_mod.__file__, "w").write(source)
        importlib.reload(twice_mod)
        report = precompile(twice_mod.tuned, signature={SIG}, targets="cuda:90", workers=0)
        print(json.dumps({{"compiled": sorted(c.config["BLOCK"] for c in report.compiled)}}))
        """,
    )
    assert got == {"compiled": [64, 128]}


def test_an_edit_to_a_jit_function_the_kernel_calls_is_compiled_by_a_warm_helper(tmp_path):
    (tmp_path / "dep_mod.py").write_text(
        textwrap.dedent("""
        import os
        os.environ.setdefault("TRITON_INTERPRET", "1")
        import triton, triton.language as tl
        from autotune import autotune

        @triton.jit
        def scale(v):
            return v * 2.0

        @triton.jit
        def dep_kernel(x, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out + offs, scale(tl.load(x + offs, mask=offs < n)), mask=offs < n)

        tuned = autotune(space={"BLOCK": (64,)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(dep_kernel)
        """)
    )
    assert _recompiled_after_edit(tmp_path, "dep_mod", "v * 2.0") == {"same": False, "seven": True}
