"""Warm start: a new process to its first tuned launch, with the winner already in the disk cache.

Three kinds of child process, each timed from spawn to exit (median of a few runs, interleaved):

  warm   imports torch, triton and autotune, decorates a vector add, launches it once: the winner is in
         the disk cache (AUTOTUNE_CACHE_DIR prepared by an earlier run), so nothing is tuned;
  cold   the same with an empty autotune cache directory: the first launch tunes every config;
  plain  the same kernel launched with a fixed config through `kernel[grid](...)`, autotune not imported.

Each child also reports its own breakdown (imports; decorate + first launch). The cost autotune adds at warm
start is measured inside the process: the time `from autotune import autotune` takes plus the warm child's
decorate + first launch over the plain child's launch. The spawn-to-exit difference `warm - plain` is printed
too, but it carries the noise of whole process lives (torch's teardown at exit alone is ~0.4 s on a CPU).
What the disk cache saves is `cold - warm`. On a GPU all children
share one Triton cache directory, primed before timing, so compiled binaries are on disk for every
variant (as in a deployment) and `cold` measures tuning itself, not compilation. Without a GPU the
kernel runs in Triton's interpreter.

By default the children read the bytecode cache that the priming child writes, as an installed package does;
`--from-source` makes every import compile its module's source (a sandbox with PYTHONDONTWRITEBYTECODE=1).

    python bench/bench_warm_start.py [--runs N] [--from-source]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402

MODES = ("plain", "warm", "cold")


def child(mode: str) -> None:
    """Body of one timed child process: import, (decorate,) launch once, synchronize, report timings."""
    t0 = time.perf_counter()
    gpu = common.prepare()
    import torch
    import triton
    import triton.language as tl

    t_autotune = time.perf_counter()
    if mode != "plain":
        from autotune import autotune
    t_imports = time.perf_counter() - t0
    t_autotune = time.perf_counter() - t_autotune

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

    device = "cuda" if gpu else "cpu"
    n = 1 << 20 if gpu else 4096
    blocks = (512, 1024, 2048, 4096) if gpu else (64, 128, 256, 512)
    x, y, out = torch.randn(n, device=device), torch.randn(n, device=device), torch.empty(n, device=device)
    if gpu:
        torch.cuda.synchronize()  # CUDA context creation is not what this measures
    t1 = time.perf_counter()
    if mode == "plain":
        add_kernel[(triton.cdiv(n, blocks[-1]),)](x, y, out, n, BLOCK=blocks[-1])
        tuned = None
    else:
        kernel = autotune(
            space={"BLOCK": blocks, "num_warps": (4, 8)} if gpu else {"BLOCK": blocks},
            key=["n"],
            grid="(cdiv(n, $BLOCK),)",
        )(add_kernel)
        kernel(x, y, out, n)
        tuned = kernel.cache_info().get("tunings", 0)
    if gpu:
        torch.cuda.synchronize()
    t_launch = time.perf_counter() - t1
    assert torch.allclose(out, x + y)
    print(
        "RESULT "
        + json.dumps(
            {
                "mode": mode,
                "imports_s": t_imports,
                "autotune_import_s": t_autotune,
                "first_launch_s": t_launch,
                "tunings": tuned,
            }
        )
    )


def _children_cpu_s() -> float:
    """CPU time (user + system) of every waited-for child so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def spawn(mode: str, env: dict[str, str]) -> dict[str, Any]:
    """Run one child; return its report plus the wall time from spawn to exit and the CPU time it used.

    CPU time is reported next to wall time because it is far less disturbed by other work on a shared
    machine (on a GPU, time spent waiting for the device shows in wall time only).
    """
    cpu = _children_cpu_s()
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(HERE), "--child", mode], env=env, capture_output=True, text=True, timeout=600
    )
    wall = time.perf_counter() - start
    cpu = _children_cpu_s() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"child {mode} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return {**json.loads(line[len("RESULT ") :]), "wall_s": wall, "cpu_s": cpu}


def main() -> None:
    """Prime the caches, then time the three kinds of child interleaved; print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="timed runs of each kind of child (default: 5 on a GPU, 3 in the interpreter)",
    )
    parser.add_argument(
        "--from-source",
        action="store_true",
        help="children compile every module from source (no bytecode cache read or written), as in a "
        "sandbox with PYTHONDONTWRITEBYTECODE=1 and no __pycache__; the default measures what an "
        "installed package gets: bytecode written by the priming child and read by the timed ones",
    )
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    gpu = common.has_cuda()
    if args.runs is None:
        args.runs = 5 if gpu else 3
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        base.update(AUTOTUNE_PROGRESS="0", TRITON_CACHE_DIR=os.path.join(tmp, "triton"))
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        if args.from_source:  # an empty bytecode prefix that nothing writes to: every import compiles its source
            base.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=os.path.join(tmp, "no-pycache"))
        if not gpu:
            base["TRITON_INTERPRET"] = "1"
        warm_dir = os.path.join(tmp, "warm-cache")
        # Priming: the first cold child tunes into warm_dir (and, on a GPU, fills Triton's cache).
        prime = spawn("cold", {**base, "AUTOTUNE_CACHE_DIR": warm_dir})
        assert prime["tunings"] == 1, prime
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for i in range(args.runs):
            for mode in MODES:
                cache = warm_dir if mode != "cold" else os.path.join(tmp, f"cold-{i}")
                report = spawn(mode, {**base, "AUTOTUNE_CACHE_DIR": cache})
                expected_tunings = {"plain": None, "warm": 0, "cold": 1}[mode]
                assert report["tunings"] == expected_tunings, report
                runs[mode].append(report)

    fields = ("wall_s", "cpu_s", "imports_s", "autotune_import_s", "first_launch_s")
    summary = {m: {f: common.median([r[f] for r in runs[m]]) for f in fields} for m in MODES}
    rows = [
        [m, *(summary[m][f] * 1e3 for f in fields), summary[m]["wall_s"] / summary["plain"]["wall_s"]] for m in MODES
    ]
    where = ("GPU" if gpu else "CPU, Triton interpreter") + (
        ", modules compiled from source" if args.from_source else ", bytecode cached"
    )
    print(f"new process -> first launch ({where}; medians of {args.runs} runs, interleaved)")
    print(
        common.table(
            [
                "child",
                "process wall ms",
                "process CPU ms",
                "all imports ms",
                "import autotune ms",
                "decorate+first launch ms",
                "x plain",
            ],
            rows,
        )
    )
    added = summary["warm"]["wall_s"] - summary["plain"]["wall_s"]
    saved = summary["cold"]["wall_s"] - summary["warm"]["wall_s"]
    added_cpu = summary["warm"]["cpu_s"] - summary["plain"]["cpu_s"]
    launch_added = summary["warm"]["first_launch_s"] - summary["plain"]["first_launch_s"]
    import_share = summary["warm"]["autotune_import_s"] / summary["plain"]["imports_s"]
    in_process = summary["warm"]["autotune_import_s"] + launch_added
    print(
        f"\nimport autotune: {summary['warm']['autotune_import_s'] * 1e3:.1f} ms = {import_share:.1%} of "
        f"import torch, triton ({summary['plain']['imports_s'] * 1e3:.0f} ms)   [target <= 3%]"
    )
    print(
        f"warm start adds {in_process * 1e3:.0f} ms in the process over a plain launch (import autotune, then "
        f"{launch_added * 1e3:.0f} ms decorating + reading the cache)   [target <= 50 ms]"
    )
    print(
        f"  spawn-to-exit wall: {added * 1e3:+.0f} ms ({added_cpu * 1e3:+.0f} ms CPU); this also holds the noise of "
        f"two ~1.4 s process lives, of which ~0.4 s is torch's teardown at exit"
    )
    print(f"the disk cache saves {saved * 1e3:.0f} ms of tuning")
    common.write_results(
        "bench_warm_start",
        {
            "gpu": gpu,
            "runs": args.runs,
            "from_source": args.from_source,
            "summary": summary,
            "raw": runs,
            "warm_minus_plain_s": added,
            "warm_minus_plain_cpu_s": added_cpu,
            "cold_minus_warm_s": saved,
            "import_share": import_share,
            "warm_added_in_process_s": in_process,
        },
    )


if __name__ == "__main__":
    main()
