"""Run by test_occupancy.py in a fresh process (no interpreter): an occupancy space tuned's compile step through
Triton's JIT on a stand-in sm_90 driver (fake_gpu), as on a GPU. Prints one JSON line: per config, its compile
status, what its occupancy became and the registers of the cubin."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
os.environ.pop("TRITON_INTERPRET", None)

import fake_gpu  # noqa: E402

fake_gpu.activate()

import torch  # noqa: E402
from kernels_for_tests import acc_tile_kernel  # noqa: E402

from autotune import FixedSpace, autotune  # noqa: E402
from autotune.aot.cubin import cubin_resource_usage  # noqa: E402
from autotune.engine.pipeline import compile_in_order_of_completion  # noqa: E402

SPACE = FixedSpace(
    [
        {"BM": 128, "BN": 128, "num_warps": 4, "occupancy": None},
        {"BM": 128, "BN": 128, "num_warps": 4, "occupancy": 4},
        {"BM": 128, "BN": 128, "num_warps": 8, "occupancy": 16},
    ]
)


def main() -> dict:
    kernel = autotune(space=SPACE, grid=(1,))(acc_tile_kernel)
    x = torch.zeros(128 * 128)
    bound = kernel.bind((x, x, 1), {})
    compiler = kernel.compiler_for(lambda config: kernel.launch_args(config, bound, (1,)))
    rows = []
    with compile_in_order_of_completion(kernel.configs, compiler, workers=2) as outcomes:
        for o in outcomes:
            regs = cubin_resource_usage(o.result.asm["cubin"])["n_regs"] if o.result is not None else None
            lowered = kernel.lowered(o.config)
            rows.append([o.config["occupancy"], o.status.value, lowered, regs, str(o.error or "")])
    return {"rows": rows, "compiler": type(compiler).__name__, "target": str(kernel.launch_target())}


if __name__ == "__main__":
    print(json.dumps(main()))
