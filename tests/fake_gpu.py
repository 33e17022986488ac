"""A stand-in Triton driver that reports an sm_90 GPU, so Triton's JIT compiles real cubins on a CPU machine.

Compiling needs no GPU; launching does. Scripts using this set it active before compiling anything and never
launch. It must run in a process without TRITON_INTERPRET=1 (where `@triton.jit` is the real JIT).
"""

from __future__ import annotations

from pathlib import Path

import torch
from triton.backends.compiler import GPUTarget


class FakeCudaDriver:
    """Just enough of `triton.runtime.driver.active` for `JITFunction.warmup` to compile for sm_90."""

    def __init__(self, arch: int = 90) -> None:
        self.target = GPUTarget("cuda", arch, 32)

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def is_active(self) -> bool:
        return True

    def map_python_to_cpp_type(self, ty: str) -> str:
        return ty


def activate(arch: int = 90) -> None:
    from triton.runtime import driver

    driver.set_active(FakeCudaDriver(arch))


def hanging_ptxas(directory: Path, hang_if: str) -> Path:
    """A ptxas at `directory/ptxas` that hangs (sleeps 600 s) on a compile when the shell condition `hang_if` holds,
    and is Triton's own ptxas otherwise (`--version` always): for TRITON_PTXAS_PATH in compile-timeout tests."""
    import triton

    real = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    fake = directory / "ptxas"
    fake.write_text(f'#!/bin/sh\nif [ "$1" != "--version" ] && {hang_if}; then exec sleep 600; fi\nexec {real} "$@"\n')
    fake.chmod(0o755)
    return fake
