"""Helpers shared by the benchmarks: GPU detection, the interpreter switch, tables, JSON results, statistics.

Import this before triton: `prepare()` sets TRITON_INTERPRET=1 when there is no CUDA GPU (Triton reads it
at import), and puts the repository root on sys.path so that `kernels` imports from a checkout.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def has_cuda() -> bool:
    """True when torch sees a CUDA device (and TRITON_INTERPRET is not forced on)."""
    if os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on"):
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA install counts as no GPU
        return False


def prepare() -> bool:
    """Make `kernels` importable and select the interpreter without a GPU; returns whether a GPU is used."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    gpu = has_cuda()
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return gpu


def skip_without_gpu(name: str) -> None:
    """For GPU-only benchmarks: say so and exit 0 when there is no CUDA GPU."""
    if not has_cuda():
        print(f"{name}: needs a CUDA GPU; skipped")
        sys.exit(0)


def device_name() -> str:
    """The GPU's name, or the CPU's description for interpreter runs."""
    if has_cuda():
        import torch

        major, minor = torch.cuda.get_device_capability()
        return f"{torch.cuda.get_device_name()} sm{major}{minor}"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores) via TRITON_INTERPRET=1"


def versions() -> dict[str, str]:
    """Versions that the numbers depend on."""
    out = {"python": platform.python_version()}
    for mod in ("torch", "triton", "autotune"):
        try:
            out[mod] = str(__import__(mod).__version__)
        except Exception:  # noqa: BLE001
            out[mod] = "unavailable"
    return out


def git_commit() -> str | None:
    """The checkout's HEAD commit (with `+dirty` when the tree has changes); outside git (a device's copy of the
    tree), AUTOTUNE_BENCH_COMMIT, else None."""
    if not (ROOT / ".git").exists():
        return os.environ.get("AUTOTUNE_BENCH_COMMIT") or None
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return (head + ("+dirty" if dirty else "")) or None
    except Exception:  # noqa: BLE001
        return None


_SCRATCH: list[tempfile.TemporaryDirectory] = []


def scratch_dir(prefix: str) -> str:
    """A private temporary directory for this run (a cache dir, Triton's cache), removed when the process exits."""
    directory = tempfile.TemporaryDirectory(prefix=prefix)
    _SCRATCH.append(directory)  # kept alive to the end; its finalizer removes it at exit
    return directory.name


def child_env(tmp: str, tag: str) -> dict[str, str]:
    """The environment of a benchmark's cold child process: fresh Triton and autotune cache directories under
    `tmp` (named by `tag`), no AUTOTUNE_* switch or TRITON_INTERPRET from the caller, no progress bar."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_") and k != "TRITON_INTERPRET"}
    env.update(
        TRITON_CACHE_DIR=os.path.join(tmp, f"triton-{tag}"),
        AUTOTUNE_CACHE_DIR=os.path.join(tmp, f"at-{tag}"),
        AUTOTUNE_PROGRESS="0",
        PYTHONUNBUFFERED="1",
    )
    return env


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write bench/results/<name>.json with the run's context (device, versions, commit, time) added."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": name,
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name(),
        "versions": versions(),
        "commit": git_commit(),
        "cpu_count": os.cpu_count(),
        **payload,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"\nwrote {path.relative_to(ROOT)}")
    return path


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Aligned plain-text columns; numbers right-aligned."""
    text = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    numeric = [all(_is_number(row[i]) for row in text) and bool(text) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in text)])


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 100:
            return f"{value:.1f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return str(value)


def _is_number(text: str) -> bool:
    try:
        float(text.rstrip("x%"))
        return True
    except ValueError:
        return text == "-"


def interleaved_medians(thunks: Sequence[Callable[[], Any]], rounds: int, rep_ms: int) -> list[float]:
    """Side-by-side re-measurement on a GPU: each thunk launched once first (compiled or loaded before any is
    timed), then `rounds` rounds of `triton.testing.do_bench` medians (L2 flushed), the order rotated every round
    so drift hits them alike; the median over the rounds for each thunk."""
    import torch
    import triton.testing

    for thunk in thunks:
        thunk()
    torch.cuda.synchronize()
    samples: list[list[float]] = [[] for _ in thunks]
    for r in range(rounds):
        shift = r % len(thunks)
        for i in [*range(shift, len(thunks)), *range(shift)]:
            samples[i].append(float(triton.testing.do_bench(thunks[i], warmup=5, rep=rep_ms, return_mode="median")))
    return [median(s) for s in samples]


def median(values: Sequence[float]) -> float:
    """The median (NaN for no values)."""
    return float(statistics.median(values)) if values else float("nan")
