"""Tune and precompile on a build machine, serve on another machine with no tuning and no compiling.

Build machine (here: this process; on a CPU it tunes through Triton's interpreter):
  1. tune the kernel for the shapes the service sees: the winners land in the tuning cache;
  2. precompile the winners for the deployment GPU (cuda:90, an H100) into Triton's compile cache:
     no GPU needed, a config that cannot compile or cannot fit the GPU would be reported;
  3. export winners and binaries as one archive (`autotune export` does the same).
Deployment machine (here: child processes with empty caches):
  4. `autotune import deploy.tar.gz`: winners into the tuning cache, binaries into Triton's cache;
  5. the service's first call finds its winner on disk (stats: disk_hits, no tuning). On an H100 the launch
     would also load the precompiled cubin from Triton's cache instead of compiling it.

Everything goes to a temporary directory: your own caches are not touched.

    python examples/deploy_precompiled.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import torch

    _GPU = torch.cuda.is_available()
except Exception:  # noqa: BLE001
    _GPU = False
if not _GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton reads it at import

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import autotune  # noqa: E402
from autotune import CartesianSpace  # noqa: E402

SHAPES = (4096, 1000)  # the sizes the service launches with (1000 is no multiple of 16: its own binary)
TARGET = "cuda:90"


@autotune.autotune(
    space=CartesianSpace(BLOCK=(64, 128, 256, 512), num_warps=(4,)),
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
)
@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def tensors(n: int) -> tuple:
    device = "cuda" if _GPU else "cpu"
    x = torch.arange(n, dtype=torch.float32, device=device)
    return x, torch.ones_like(x), torch.empty_like(x)


def build(workdir: Path) -> Path:
    """Steps 1-3: returns the archive."""
    from autotune.aot import export_archive, precompile

    for n in SHAPES:
        x, y, out = tensors(n)
        add_kernel(x, y, out, n)
        print(f"[build] tuned add_kernel for n={n}: winner {dict(add_kernel.best_config)}")
    for n in SHAPES:
        x, y, out = tensors(n)
        report = precompile(add_kernel, x, y, out, n, targets=[TARGET], winners_only=True)
        print(
            f"[build] precompile for {TARGET} (n={n}): {len(report.compiled)} compiled "
            f"({report.fresh} now, {report.cache_hits} already cached), {len(report.failed)} failed, "
            f"{report.wall_s:.2f} s"
        )
        for failure in report.failed:
            print(f"[build]   {dict(failure.config)}: {failure.kind}: {failure.error.splitlines()[-1]}")
    archive = workdir / "deploy.tar.gz"
    manifest = export_archive(archive, kernels=[add_kernel])
    print(
        f"[build] exported {archive.name}: {len(manifest.records)} records and {len(manifest.binaries)} compiled "
        f"kernels for {', '.join(manifest.targets)} (Triton {manifest.triton_version})"
    )
    return archive


def serve() -> None:
    """Step 5, in the deployment process: launch for the service's shapes and report what the cache did."""
    for n in SHAPES:
        x, y, out = tensors(n)
        add_kernel(x, y, out, n)
        correct = bool(torch.equal(out, x + y))
        print(f"[deploy] n={n}: launched the imported winner {dict(add_kernel.best_config)}, correct: {correct}")
    counters = autotune.stats()["add_kernel"]
    print(f"[deploy] stats: disk_hits={counters['disk_hits']} tunings={counters['tunings']}")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="autotune-deploy-") as tmp:
        workdir = Path(tmp)
        # The build machine's caches.
        os.environ["AUTOTUNE_CACHE_DIR"] = str(workdir / "build-autotune")
        os.environ["TRITON_CACHE_DIR"] = str(workdir / "build-triton")
        archive = build(workdir)

        # The deployment machine: empty caches, a new process for each step.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        env.update(
            AUTOTUNE_CACHE_DIR=str(workdir / "deploy-autotune"),
            TRITON_CACHE_DIR=str(workdir / "deploy-triton"),
            AUTOTUNE_PROGRESS="0",
            PYTHONPATH=os.pathsep.join(
                filter(None, [str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
            ),
        )
        print(f"[deploy] $ python -m autotune import {archive.name}")
        imported = subprocess.run(
            [sys.executable, "-m", "autotune", "import", str(archive), "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(imported.stdout)
        print(
            f"[deploy] imported {len(result['records_imported'])} records and {len(result['binaries_imported'])} "
            f"compiled kernels ({len(result['records_skipped'])} + {len(result['binaries_skipped'])} skipped)"
        )
        cubins = sorted(p.parent.name[:12] for p in (workdir / "deploy-triton").glob("*/add_kernel.cubin"))
        print(f"[deploy] Triton's cache now holds {len(cubins)} cubins for {TARGET}: {', '.join(cubins)}")
        served = subprocess.run([sys.executable, __file__, "--serve"], env=env, capture_output=True, text=True)
        sys.stdout.write(served.stdout)
        if served.returncode != 0:
            sys.stderr.write(served.stderr)
            raise SystemExit(served.returncode)
    print("deployed: tuned and precompiled on one machine, served on another with no tuning")


if __name__ == "__main__":
    if "--serve" in sys.argv[1:]:
        serve()
    else:
        main()
