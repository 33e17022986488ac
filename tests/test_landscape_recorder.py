"""bench/record_landscape.py, the brute-force recorder of kernels/matmul.py's landscape (issue 17), on a CPU: its
GPU space is the kernel's WIDE_SPACE, and an interpreter run writes a landscape that the replay reads and tunes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from autotune import Config
from autotune.reporting.replay import load_landscape, replay_once

REPO = Path(__file__).resolve().parents[1]


def _recorder():
    spec = importlib.util.spec_from_file_location("record_landscape", REPO / "bench" / "record_landscape.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_recorded_gpu_space_is_the_kernels_wide_space():
    from kernels.matmul import WIDE_SPACE

    recorder = _recorder()
    recorded = [Config(c) for c in recorder.space(recorder.AXES_GPU)]
    assert recorded == list(WIDE_SPACE.configs())
    assert len(recorded) == 888 and {k: list(v) for k, v in WIDE_SPACE.axes.items()} == recorder.AXES_GPU


def test_an_interpreter_recording_is_a_landscape_the_replay_tunes(tmp_path):
    out = tmp_path / "matmul.json.gz"
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path / "triton"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "record_landscape.py"), "--interpret", "--out", str(out), "--reps", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "complete: wrote" in proc.stdout
    landscape = load_landscape(out)
    assert landscape.kernel == "matmul" and landscape.valid_configs == 5
    assert landscape.problem_size == (64, 64, 64)  # the shape it ran, read back for bench_search_gpu
    for entry in landscape.entries.values():  # every config ran, checked against torch, timed 3 times
        assert isinstance(entry["time"], float) and len(entry["times"]) == 3 and entry["compile_time"] > 0
    fastest = min(landscape.entries, key=landscape.time_of)
    run = replay_once(landscape, "exhaustive", budget=5, seed=0, workers=2)
    assert run["evaluations"] == 5 and run["chosen_ms"] >= landscape.best_ms
    assert Config(run["chosen"]) in landscape.entries and landscape.time_of(fastest) == landscape.best_ms
