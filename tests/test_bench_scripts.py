"""The benchmark scripts mostly run on a GPU, which this suite never has; what it can check here keeps a lent GPU's
few minutes for measuring: every script starts (its imports and arguments), and the scripts, kernels and examples
use autotune's public API only (a private name they reached was renamed once, and the GPU quality phase died)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "bench").glob("bench_*.py")) + [ROOT / "bench" / "record_landscape.py"]
USER_CODE = [
    *SCRIPTS,
    *(ROOT / "bench").glob("*.py"),
    *(ROOT / "kernels").glob("*.py"),
    *(ROOT / "examples").glob("*.py"),
]


# Private names these scripts may use that are not autotune's: the standard library's and torch's documented ones
# (os._exit, sys._getframe, torch._dynamo, ...) and a namedtuple's public methods.
OTHERS = {"os", "sys", "torch", "triton", "tl", "np", "numpy", "multiprocessing", "threading", "self", "cls"}
NAMEDTUPLE = {"_replace", "_asdict", "_fields", "_make"}


def private_reaches(path: Path, root: Path = ROOT) -> list[str]:
    """`obj._name` on anything but self/cls and the modules in OTHERS, and `from autotune... import _name`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):  # torch.cuda._sleep: judged by its root name
                base = base.value
            if node.attr not in NAMEDTUPLE and not (isinstance(base, ast.Name) and base.id in OTHERS):
                found.append(f"{path.relative_to(root)}:{node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autotune"):
            found += [
                f"{path.relative_to(root)}:{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("_")
            ]
    return found


def test_scripts_kernels_and_examples_use_only_public_names():
    reaches = [line for path in sorted(set(USER_CODE)) for line in private_reaches(path)]
    assert reaches == [], "use autotune's public API (bind, launch_args, ...) instead:\n" + "\n".join(reaches)


def test_the_private_reach_check_finds_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from autotune.decorator import _private\nkernel._named_args(1)\nself._fine = 1\nx.__dict__\n"
        "os._exit(0)\nsys._getframe()\ntorch.cuda._sleep(1)\npoint._replace(x=1)\n"
    )
    assert sorted(r.split(": ", 1)[1] for r in private_reaches(probe, tmp_path)) == ["._named_args", "import _private"]


def _helps(scripts) -> dict[str, dict]:
    """Each script's `--help`, run in one process (torch and triton imported once): {script: {"help": its
    output, "problem": why it did not print its help and exit 0, or None}}."""
    code = (
        "import contextlib, io, json, runpy, sys\n"
        "found = {}\n"
        "for script in sys.argv[1:]:\n"
        "    sys.argv, out, problem = [script, '--help'], io.StringIO(), 'ran instead of printing its help'\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(out):\n"
        "            runpy.run_path(script, run_name='__main__')\n"
        "    except SystemExit as exc:\n"
        "        problem = None if exc.code in (0, None) else f'exit {exc.code}'\n"
        "    except BaseException as exc:\n"
        "        problem = f'{type(exc).__name__}: {exc}'\n"
        "    found[script] = {'help': out.getvalue(), 'problem': problem}\n"
        "print(json.dumps(found))\n"
    )
    env = dict(
        os.environ,
        TRITON_INTERPRET="1",
        AUTOTUNE_PROGRESS="0",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), str(ROOT / "bench"), os.environ.get("PYTHONPATH")) if p),
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *map(str, scripts)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_every_benchmark_script_starts():
    """`--help` of each script: its imports resolve and its arguments parse, so a renamed autotune module or
    option fails here, not on the GPU."""
    problems = {script: found["problem"] for script, found in _helps(SCRIPTS).items() if found["problem"]}
    assert problems == {}


def _suite(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_suite.sh"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**_without_budget(os.environ), "PYTHON": sys.executable, **env},
    )


def _without_budget(environ: Mapping[str, str]) -> dict[str, str]:
    """The suite's phases run with a PHASE_BUDGET_S of their own; one set where the tests run is not theirs."""
    return {k: v for k, v in environ.items() if k != "PHASE_BUDGET_S"}


def test_gpu_suite_plan_fits_the_device_budget_and_names_real_options():
    """`gpu_suite.sh plan` lists each phase's steps; every phase fits its budget (two phases and a machine's start
    fit a task's 15 device minutes), and every option a step passes to a benchmark is one that script takes, so a
    renamed option fails here rather than after the GPU's start."""
    plan = _suite("plan")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    phases = [line[:-1] for line in plan.stdout.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert phases == ["core", "quality", "search", "compiled", "extra", "recheck"]
    assert plan.stdout.count("s of steps in a budget of 320 s") == 6
    assert "take at most 840 s of a task's 900" in plan.stdout
    over = _suite("plan", PHASE_BUDGET_S="250")  # every phase is checked, not only the first
    assert over.returncode == 1 and over.stdout.count("does not fit PHASE_BUDGET_S") == 5
    too_long = _suite("plan", PHASE_BUDGET_S="450")  # the phases fit, two of them do not fit a task
    assert too_long.returncode == 1 and "do not fit a task's 900 s" in too_long.stdout
    assert _suite("core quality").returncode == 2  # one phase at a time, named exactly

    options: dict[str, set[str]] = {}
    for line in plan.stdout.splitlines():
        words = line.split()
        scripts = [w for w in words if w.startswith("bench/") and w.endswith(".py")]
        if scripts:
            options.setdefault(scripts[0], set()).update(w for w in words if w.startswith("--"))
    assert len(options) == 10, sorted(options)
    helps = {script: found["help"] for script, found in _helps(options).items()}
    unknown = {
        s: sorted(
            o
            for o in opts
            if o not in helps[s].split()
            and f"{o}," not in helps[s]
            and not any(w.startswith(o + "=") or w.startswith(o + "[") for w in helps[s].split())
        )
        for s, opts in options.items()
    }
    assert not any(unknown.values()), unknown


def test_gpu_suite_skips_what_its_budget_has_no_room_for_and_packs_the_results(tmp_path):
    """A phase run with no time left skips each step, saying so, and still packs its folder into $OUT (what comes
    back from the device even when a step is cut off). Run from a copy: the suite writes under its checkout."""
    copy = tmp_path / "checkout"
    (copy / "bench").mkdir(parents=True)
    for name in ("gpu_suite.sh", "record_landscape.py", "common.py"):
        (copy / "bench" / name).write_bytes((ROOT / "bench" / name).read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run(
        ["bash", str(copy / "bench" / "gpu_suite.sh"), "quality"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHON=sys.executable, PHASE_BUDGET_S="0", OUT=str(out), AUTOTUNE_BENCH_COMMIT="abc1234"),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for step in ("selection_quality", "dispatch", "determinism"):
        assert f"== {step}: skipped, 0 s left in the phase" in result.stdout
    with tarfile.open(out / "quality.tar.gz") as packed:
        names = packed.getnames()
        slug = names[0].split("/")[0]  # no_gpu here, the GPU's name where the suite's interpreted run is on one
        log = packed.extractfile(f"{slug}/logs/quality.log").read().decode()
        env_log = packed.extractfile(f"{slug}/logs/env-quality.log").read().decode()
    assert f"{slug}/logs/quality.log" in names and log.count("skipped") == 3
    assert "commit abc1234" in env_log and "autotune from" in env_log


def test_gpu_suite_wheels_that_cannot_be_downloaded_leave_the_carried_ones(tmp_path):
    """On the GPU machine (no package index) `wheels` fails; it used to empty `.whl` first, so the phases after it
    ran without msgspec. A failed download now leaves `.whl` as it was."""
    copy = tmp_path / "checkout"
    (copy / "bench").mkdir(parents=True)
    (copy / "bench" / "gpu_suite.sh").write_bytes((ROOT / "bench" / "gpu_suite.sh").read_bytes())
    (copy / ".whl").mkdir()
    (copy / ".whl" / "msgspec-0.0-py3-none-any.whl").write_bytes(b"carried")
    no_index = tmp_path / "python-without-an-index"
    no_index.write_text("#!/bin/sh\necho 'ERROR: No matching distribution found for msgspec' >&2\nexit 1\n")
    no_index.chmod(0o755)
    result = subprocess.run(
        ["bash", str(copy / "bench" / "gpu_suite.sh"), "wheels"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHON=str(no_index)),
    )
    assert result.returncode == 1 and ".whl is left as it was" in result.stderr
    assert (copy / ".whl" / "msgspec-0.0-py3-none-any.whl").read_bytes() == b"carried"
    assert not (copy / ".whl.part").exists()


def test_cold_tuning_times_functions_the_tuner_still_has():
    """bench_cold_tuning times the tuner's per-config measurement by wrapping its functions by name: a rename
    fails here, not as a silently missing figure after a GPU's start (the hook once named a function renamed)."""
    code = "import sys; sys.path.insert(0, 'bench'); import bench_cold_tuning as b; print(b.instrument_measurement([]))"
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stdout + proc.stderr[-2000:]
