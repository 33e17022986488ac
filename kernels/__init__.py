"""Tuned Triton kernels with torch wrappers and torch references (not installed; import from the repo root).

Modules: `vector_add`, `softmax`, `matmul`, `layer_norm`. Each exposes a `SPACE` sized for a real GPU, a
small `CPU_SPACE` that stays quick in Triton's interpreter, a `make_<name>(space=SPACE, **autotune_kwargs)`
factory returning an `@autotune`-decorated kernel, the default instance built from `SPACE`
(`<name>_kernel`), a torch wrapper taking an optional `kernel=`, and a plain-torch `<name>_reference`.
Import what you need (`from kernels.matmul import matmul`); the package imports no submodule itself, so
that `kernels.matmul` stays the module rather than being shadowed by the function of the same name.
"""

from __future__ import annotations

__all__ = ["vector_add", "softmax", "matmul", "layer_norm"]
