"""Every example runs as a user would run it (a subprocess, Triton's interpreter, a fresh cache) and says
what it showed: exit status 0 and the example's key line in its output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# example file -> lines its output must contain (the claim the example demonstrates)
EXPECTED: dict[str, tuple[str, ...]] = {
    "inplace_kernel.py": (
        "restore_value=['acc']: winner",
        "result == one untuned launch: True",
        "without restore_value: result == one untuned launch: False",
        "out == sum(x): True",
        "in-place tuning is safe",
    ),
    "verify_configs.py": (
        "verify=Reference(add_reference, outputs=('out',)): rejected [{'BLOCK': 64}]",
        "verify=out_is_sum: rejected [{'BLOCK': 64}]",
        "verification rejected the wrong config",
    ),
    "offline_mode.py": (
        "[offline process] hit  n=1024: launched the stored winner",
        "launched the fallback {'BLOCK': 128} untuned, correct: True; warnings: 1",
        "stats: tunings=0",
        "offline mode: hit used the tuned winner, miss used the fallback and warned once",
    ),
    "clear_cache.py": (
        "$ python -m autotune cache list",
        "4 entries in",
        "clear_autotune_cache(add_kernel, key=(256,)) removed 2 entries",
        "clear_autotune_cache('scale_kernel') removed 1 entry",
        "clear_autotune_cache(add_kernel) removed 3 entries",
        "clear_autotune_cache() removed 1 entry",
        "no entries in",
        "cache cleared: by key, by kernel, and everything",
    ),
    "quickstart.py": (
        "space: 7 configs; winner: Config(",
        "tunings: 1, cache hits: 1, output matches torch: True",
    ),
    "migrate_from_triton.py": (
        "next process: winner read from the disk cache without tuning: True, same winner: True, output equal: True",
        "migrated from triton.autotune by changing one import",
    ),
    "deploy_precompiled.py": (
        "[deploy] stats: disk_hits=2 tunings=0",
        "deployed: tuned and precompiled on one machine, served on another with no tuning",
    ),
    "compiled_model.py": (
        "warm-up: add_kernel: 2 keys tuned, 0 already cached",
        "warm-up: scaled_relu_kernel: 2 keys tuned, 0 already cached",
        "compiled with fullgraph=True: 0 graph breaks",
        "served 2 shapes from one compiled graph; tunings while serving: 0; output equals eager: True",
    ),
    "distributed_tuning.py": ("second call with the same key: memory hit (1), no communication",),
}


def run_example(name: str, cache_dir: Path) -> subprocess.CompletedProcess:
    """Run examples/<name> with the interpreter and a private cache directory; no AUTOTUNE_* modes leak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(
        TRITON_INTERPRET="1",
        AUTOTUNE_CACHE_DIR=str(cache_dir),
        AUTOTUNE_PROGRESS="0",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
    )
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_shows_its_point(name: str, tmp_path: Path) -> None:
    result = run_example(name, tmp_path / "cache")
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"examples/{name} exited {result.returncode}:\n{output}"
    missing = [line for line in EXPECTED[name] if line not in result.stdout]
    assert not missing, f"examples/{name} did not print {missing}; output:\n{output}"

    # An example is what a user copies first: it shows no IsolationWarning (its kernels tune in-process, the default).
    assert "IsolationWarning" not in result.stderr, f"examples/{name} warned:\n{result.stderr}"


def test_the_quickstart_run_again_says_it_read_the_winner_from_the_cache(tmp_path: Path) -> None:
    assert run_example("quickstart.py", tmp_path / "cache").returncode == 0
    again = run_example("quickstart.py", tmp_path / "cache")
    assert again.returncode == 0, again.stderr
    assert "read from the cache (tuned on 20" in again.stdout and "tunings:" not in again.stdout
