"""Run by test_jit_compile.py in a fresh process (no interpreter): the JIT compile path on a fake sm_90 driver."""
from __future__ import annotations

import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))
os.environ.pop("TRITON_INTERPRET", None)

import fake_gpu  # noqa: E402

fake_gpu.activate()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autotune import Config  # noqa: E402
from autotune.compilers import JitCompiler  # noqa: E402
from autotune.pipeline import compile_in_order_of_completion  # noqa: E402


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def main() -> None:
    x = torch.randn(1000)
    compile_threads: list[str] = []
    kernel_cache = add_kernel.device_caches[0][0]
    real_compile = add_kernel.compile

    def counting_compile(*args, **kwargs):
        compile_threads.append(threading.current_thread().name)
        return real_compile(*args, **kwargs)

    add_kernel.compile = counting_compile

    def prepare(config: Config):
        return (x, x, x, 1000), {"BLOCK": config["BLOCK"], "num_warps": config["num_warps"]}, (1,)

    configs = [Config(BLOCK=b, num_warps=w) for b in (64, 128) for w in (2, 4)] + [Config(BLOCK=48, num_warps=4)]
    compiler = JitCompiler(add_kernel, prepare)
    with compile_in_order_of_completion(configs, compiler, workers=2) as outcomes:
        results = [(dict(o.config), o.status.value, type(o.result).__name__, str(o.error)[:200]) for o in outcomes]
    compiles_in_pipeline = len(compile_threads)
    # The winner's launch path: a warm-up of any compiled config must find it in the JIT's cache.
    again = add_kernel.warmup(x, x, x, 1000, BLOCK=128, num_warps=4, grid=(1,))
    print(json.dumps({
        "results": results,
        "compile_threads": compile_threads,
        "compiles_in_pipeline": compiles_in_pipeline,
        "compiles_after": len(compile_threads),
        "again_type": type(again).__name__,
        "cached_kernels": len(kernel_cache),
        "calling_thread": threading.current_thread().name,
    }))


if __name__ == "__main__":
    main()
