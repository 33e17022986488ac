"""No GPU driver and no TRITON_INTERPRET: one error that blames the environment and says what to do (#12 item 4).
Real processes: the interpreter switch is read when triton is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _without_interpreter() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even where the machine has one
    return env


@pytest.fixture(scope="module", autouse=True)
def _no_driver_here():
    probe = subprocess.run(
        [sys.executable, "-c", "from triton.runtime.driver import driver; driver.active"],
        env=_without_interpreter(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode == 0:
        pytest.skip("a GPU driver is active in this environment; these tests need a machine without one")


def test_tuning_without_a_driver_raises_one_environment_error_before_any_config():
    code = (
        "import torch\n"
        "from autotune import NoDeviceError, autotune\n"
        "from kernels_for_tests import add_kernel\n"
        "k = autotune(space={'BLOCK': [16, 32]}, key=['n'], grid='(cdiv(n, $BLOCK),)')(add_kernel)\n"
        "x = torch.ones(16)\n"
        "try:\n"
        "    k(x, x, torch.empty_like(x), 16)\n"
        "except NoDeviceError as exc:\n"
        "    print('NoDeviceError:', exc)\n"
        "    print('tried', len(k.cache.records()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_without_interpreter(), capture_output=True, text=True, timeout=300
    )
    assert "set TRITON_INTERPRET=1" in out.stdout and "tried 0" in out.stdout, out.stdout + out.stderr
    assert "Fix the kernel or the search space" not in out.stdout


def test_precompile_cli_without_a_driver_or_target_says_to_name_one(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "precompile",
            "kernels.vector_add:add_kernel",
            "--signature",
            "x_ptr=*fp32,y_ptr=*fp32,out_ptr=*fp32,n_elements=i32",
        ],
        env=_without_interpreter(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode != 0
    assert "--target cuda:90" in out.stderr and "Traceback" not in out.stderr, out.stderr
