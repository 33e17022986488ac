"""A sweep of a kernel defined in a script (the `if __name__ == "__main__":` form the sweep's docs show): the sweep
worker imports the script as a module, and the winners it files are the script's own kernel's, which the script
then reads from the cache; the worker's isolation imports the script too. Real processes, the interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autotune.storage.files import disk_entries

REPO = str(Path(__file__).parent.parent)

SCRIPT = """
import functools, sys, warnings
import torch, triton, triton.language as tl
import autotune


@autotune.autotune(
    space=autotune.CartesianSpace(BLOCK=[16, 32]),
    key=["n"],
    grid=lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),),
)
@triton.jit
def script_add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)


def make(n):
    x = torch.randn(n)
    return (x, x, torch.empty(n), n), {}


if __name__ == "__main__":
    warnings.simplefilter("error")  # a warning in this process fails the script
    if sys.argv[1] == "sweep":
        print([k.status for k in autotune.sweep(script_add, [functools.partial(make, 64)], workers=1).keys])
    else:
        (x, y, out, n), _ = make(64)
        script_add(x, y, out, n)
        torch.testing.assert_close(out, x + y)
        print(script_add.record().winner)
"""


def _run(script: Path, step: str, **env: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, str(script), step],
        env={**os.environ, "PYTHONPATH": path, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_sweep_of_a_script_s_kernel_files_winners_the_script_then_reads(tmp_path):
    script = tmp_path / "tune_add.py"
    script.write_text(SCRIPT)
    swept = _run(script, "sweep")
    assert swept.returncode == 0, swept.stderr[-3000:]
    assert swept.stdout.strip() == "['tuned']"
    assert "Warning" not in swept.stderr, swept.stderr[-3000:]  # no IsolationWarning, no CacheWarning
    (entry,) = [e for e in disk_entries("script_add") if e.record]
    assert entry.record.kernel_id == "__main__:script_add" and entry.record.where == "worker process"

    served = _run(script, "serve", AUTOTUNE_OFFLINE="1")  # offline: a winner not read back would warn
    assert served.returncode == 0, served.stderr[-3000:]
    assert served.stdout.strip() == repr(entry.record.winner)
