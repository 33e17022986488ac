"""Isolation (DESIGN 2d) with a launch grid a worker cannot load, a worker's request it cannot read, one deadline per
trial, and the documented `autotune.isolation` path. Real worker processes and scripts, kernels through the
interpreter."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from autotune import NoValidConfigError, OptionError, Tuning, autotune
from autotune.engine.compilers import FunctionCompiler
from autotune.engine.isolation.pool import Worker

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

# A trial whose compile takes SLEEP_S and whose measurement (setup= after that compile) takes SLEEP_S again: twice
# the sleep, over TRIAL_S, however fast the machine is; each part alone is under it.
SLEEP_S, TRIAL_S = 3.0, 4.5
_PENDING: list[int] = []


def _slow_compile(config) -> None:
    if config["BLOCK"] == 64:
        time.sleep(SLEEP_S)
        _PENDING.append(1)


def _slow_setup(**named) -> None:
    if _PENDING:
        _PENDING.clear()
        time.sleep(SLEEP_S)


@autotune(
    space=[{"BLOCK": 64}, {"BLOCK": 128}],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    setup=_slow_setup,
    tuning=Tuning(isolate="process", trial_timeout_s=TRIAL_S, compile_workers=0, warmup=0, reps=1, refine_topk=0),
)
@triton.jit
def slow_trial_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


slow_trial_add.compiler_factory = lambda tuned, prepare: FunctionCompiler(_slow_compile)


@triton.jit
def jit_add(x, y, out, n, BLOCK: tl.constexpr):  # autotuned by _tuned: a worker imports it and decorates it anew
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def _tuned(isolate: str):
    """`jit_add` autotuned away from its definition (a worker can import it: a grid is all it may lack). Not a
    kernel of isolation_kernels: an "auto" note is said once per kernel, and other tests expect theirs."""
    return autotune(
        space={"BLOCK": [32, 64]},
        key=["n"],
        tuning=Tuning(isolate=isolate, trial_timeout_s=120, compile_workers=0, warmup=0, reps=1, refine_topk=0),
    )(jit_add)


SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    sys.path.insert(0, {tests!r})
    import torch, triton
    from autotune import Tuning, autotune
    from isolation_kernels import plain_jit_add

    def grid(meta):  # the script's own: pickles as a reference to __main__.grid
        return (triton.cdiv(meta["n"], meta["BLOCK"]),)

    out = {{}}
    for mode, n in (("auto", 100), ("process", 101)):
        k = autotune(space={{"BLOCK": [32, 64]}}, key=["n"], tuning=Tuning(isolate=mode, trial_timeout_s=120,
                     compile_workers=0, warmup=0, reps=1, refine_topk=0))(plain_jit_add)
        x, y, z = torch.randn(n), torch.randn(n), torch.empty(n)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                k[grid](x, y, z, n)
                out[mode] = ["ok", k.record((n,)).where, bool(torch.allclose(z, x + y))]
            except Exception as exc:
                out[mode] = [type(exc).__name__, str(exc)]
        out[mode + " warnings"] = [f"{{w.category.__name__}}: {{w.message}}" for w in caught]
    print(json.dumps(out))
""")


def test_a_grid_defined_in_the_script_is_tuned_in_process_under_auto_and_refused_under_process(tmp_path):
    """A grid function of the caller's script pickles as `__main__.grid`, which a worker (whose `__main__` is not the
    script) cannot load: as for a kernel defined there, "auto" says so and tunes in-process, "process" refuses,
    naming the grid; no config is recorded crashed."""
    script = tmp_path / "tune_with_a_script_grid.py"
    script.write_text(SCRIPT.format(tests=str(TESTS)))
    env = dict(os.environ, PYTHONPATH=str(REPO), TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["auto"] == ["ok", "in-process", True], out
    notes = [w for w in out["auto warnings"] if w.startswith("IsolationWarning") and "tuned in this process" in w]
    assert len(notes) == 1 and "its launch grid <function grid" in notes[0] and "__main__" in notes[0], out
    assert out["process"][0] == "OptionError", out
    assert "its launch grid <function grid" in out["process"][1] and "importable module" in out["process"][1]


def hidden_grid_of(module_name: str, tmp_path, monkeypatch):
    """A grid function of a module (`module_name`) this process loaded from a file off sys.path: it pickles by
    reference, and a worker cannot import that module."""
    path = tmp_path / f"{module_name}.py"
    path.write_text("import triton\n\ndef grid(meta):\n    return (triton.cdiv(meta['n'], meta['BLOCK']),)\n")
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, module_name, module)
    spec.loader.exec_module(module)
    return module.grid


@pytest.fixture
def hidden_grid(tmp_path, monkeypatch):
    return hidden_grid_of("fz_hidden_grids", tmp_path, monkeypatch)


def test_a_grid_the_worker_cannot_import_fails_the_worker_s_start_not_the_configs(hidden_grid):
    """The grid travels with the call's arguments when the worker gets them: one it cannot import makes "auto" tune
    in-process (saying why) and "process" raise an OptionError naming the module, instead of every config being
    recorded crashed by a worker that died reading its trial."""
    x, y, out = torch.randn(70), torch.randn(70), torch.empty(70)
    kernel = _tuned("auto")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel[hidden_grid](x, y, out, 70)
    torch.testing.assert_close(out, x + y)
    assert kernel.record((70,)).where == "in-process"
    notes = [str(w.message) for w in caught if "tuned in this process" in str(w.message)]
    assert len(notes) == 1 and "fz_hidden_grids" in notes[0] and "launch grid" in notes[0], notes
    with pytest.raises(OptionError, match="fz_hidden_grids") as raised:
        _tuned("process")[hidden_grid](x, y, out, 71)
    assert "launch grid" in str(raised.value)


def test_a_request_the_worker_cannot_read_is_answered_as_an_error_and_the_worker_lives_on(hidden_grid):
    """The worker decodes each request itself: one naming what it cannot import gets an error answer (the parent
    blames the request, never a config), and the worker answers the next request."""
    worker = Worker()
    try:
        worker.start()
        reply = worker.request(("keep", [], hidden_grid), 300)
        assert reply[0] == "error" and "could not read the request" in reply[1] and "fz_hidden_grids" in reply[1]
        assert worker.alive
        assert worker.request(("keep", []), 300) == ("ok",)
    finally:
        worker.close()


def test_a_trial_s_compile_and_measurement_share_one_trial_timeout():
    """`trial_timeout_s` bounds one config's compile and measurement together: a config whose compile and whose
    measurement each fit in it, but not both, is recorded `timeout`; the other config wins."""
    x, y, out = torch.randn(300), torch.randn(300), torch.empty(300)
    try:
        slow_trial_add(x, y, out, 300)
    except NoValidConfigError as exc:  # not expected: the fast config should have run
        pytest.fail(f"the fast config failed too: {exc}")
    torch.testing.assert_close(out, x + y)
    trials = {t.config["BLOCK"]: t for t in slow_trial_add.record((300,)).trials}
    assert trials[128].ok
    assert trials[64].status.value == "timeout", (trials[64].status, trials[64].error)
    assert f"{TRIAL_S:g} s since the request" in (trials[64].error or "")


def test_the_documented_isolation_module_path_imports():
    """DESIGN and the errors name `autotune.isolation.shutdown()`: importing it by that path works."""
    from autotune.engine.isolation import shutdown as engine_shutdown
    from autotune.isolation import shutdown

    assert shutdown is engine_shutdown
