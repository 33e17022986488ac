"""The package type-checks: `python -m mypy` with the `[tool.mypy]` settings of pyproject.toml exits 0.

mypy found a real bug here once (`autotune --version` printed "unknown"); this keeps new ones from creeping in.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install -e '.[dev]')")
def test_package_type_checks():
    # The project's own incremental cache (.mypy_cache, git-ignored): a warm run takes seconds, a cold one ~30 s.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"mypy exited {result.returncode}:\n{result.stdout}{result.stderr}"
