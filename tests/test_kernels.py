"""kernels/: each tuned kernel against its torch reference, on the CPU through Triton's interpreter.

Run from the repository root (`python -m pytest tests/test_kernels.py`): `kernels` is not installed, so
the repository root is put on sys.path here. Sizes are small and odd (not multiples of any block) and
the spaces are each module's 2-4 config CPU_SPACE with the "fast" preset, so the interpreter stays quick.
Tuning runs with `verify=Reference(...)`, so a record whose trials are all "ok" means that every config of
the space, not only the winner, matched the torch reference.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from autotune import Reference  # noqa: E402
from kernels import layer_norm as ln_mod  # noqa: E402
from kernels import matmul as mm_mod  # noqa: E402
from kernels import softmax as sm_mod  # noqa: E402
from kernels import vector_add as add_mod  # noqa: E402

ON_GPU = os.environ.get("TRITON_INTERPRET", "0") != "1" and torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
TUNING = "fast"

# Triton's interpreter keeps bf16 as raw 16-bit integers: arithmetic or tl.dot on bf16 values gives
# garbage there (kernels that upcast to fp32 first, softmax and layer norm, are fine). GPU only.
BF16_NEEDS_GPU = pytest.param(torch.bfloat16, marks=pytest.mark.gpu, id="bfloat16")

TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
}


def _verify(fn, output: str, dtype: torch.dtype, tol: dict | None = None) -> Reference:
    """Check each config's `output` argument against `fn(**kernel_args)` while tuning."""
    return Reference(fn, outputs=(output,), **(tol or TOL[dtype]))


def _make_add(dtype: torch.dtype):
    return add_mod.make_add(
        add_mod.CPU_SPACE,
        tuning=TUNING,
        verify=_verify(
            lambda x_ptr, y_ptr, **_: add_mod.add_reference(x_ptr, y_ptr), "out_ptr", dtype, dict(atol=0, rtol=0)
        ),
    )


def _make_softmax(dtype: torch.dtype):
    return sm_mod.make_softmax(
        sm_mod.CPU_SPACE,
        tuning=TUNING,
        verify=_verify(lambda in_ptr, **_: sm_mod.softmax_reference(in_ptr), "out_ptr", dtype),
    )


def _mm_tol(dtype: torch.dtype) -> dict:
    """fp32 inputs go through TF32 tensor cores on a GPU; the interpreter multiplies exactly."""
    return dict(atol=1e-2, rtol=1e-2) if (dtype is torch.float32 and ON_GPU) else TOL[dtype]


def _make_matmul(dtype: torch.dtype):
    return mm_mod.make_matmul(
        mm_mod.CPU_SPACE,
        tuning=TUNING,
        verify=_verify(lambda a_ptr, b_ptr, **_: mm_mod.matmul_reference(a_ptr, b_ptr), "c_ptr", dtype, _mm_tol(dtype)),
    )


def _make_layer_norm(dtype: torch.dtype):
    return ln_mod.make_layer_norm(
        ln_mod.CPU_SPACE,
        tuning=TUNING,
        verify=_verify(
            lambda x_ptr, w_ptr, b_ptr, eps, **_: ln_mod.layer_norm_reference(x_ptr, w_ptr, b_ptr, eps), "y_ptr", dtype
        ),
    )


def _assert_tuned_every_config(kernel, key, space) -> None:
    """The record of `key` (KeyError if none) holds one ok trial per config of `space`, no more, no fewer."""
    record = kernel.record(key)
    assert len(record.trials) == len(space)
    assert {t.config for t in record.trials} == set(space)
    assert [t.status.value for t in record.trials] == ["ok"] * len(space), [t.error for t in record.trials]
    assert all(t.median_ms is not None and t.median_ms > 0 for t in record.trials)
    assert record.winner in set(space)


# --- vector add ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, BF16_NEEDS_GPU])
@pytest.mark.parametrize("n", [1, 97, 1000])
def test_add_matches_reference(n: int, dtype: torch.dtype) -> None:
    kernel = _make_add(dtype)
    x = torch.randn(n, dtype=dtype, device=DEVICE)
    y = torch.randn(n, dtype=dtype, device=DEVICE)
    torch.testing.assert_close(add_mod.add(x, y, kernel=kernel), add_mod.add_reference(x, y), atol=0, rtol=0)


def test_add_non_contiguous_and_nd() -> None:
    kernel = _make_add(torch.float32)
    x = torch.randn(13, 11, device=DEVICE).t()
    y = torch.randn(11, 13, device=DEVICE)
    out = add_mod.add(x, y, kernel=kernel)
    assert out.shape == (11, 13)
    torch.testing.assert_close(out, add_mod.add_reference(x, y), atol=0, rtol=0)


def test_add_records_one_trial_per_config() -> None:
    kernel = _make_add(torch.float32)
    x = torch.randn(300, device=DEVICE)
    add_mod.add(x, x, kernel=kernel)
    _assert_tuned_every_config(kernel, (512,), add_mod.CPU_SPACE)  # key: next_power_of_2(300)


def test_add_rejects_mismatched_inputs() -> None:
    with pytest.raises(ValueError, match="must match"):
        add_mod.add(torch.zeros(3), torch.zeros(4))


# --- softmax ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7, 37), (3, 5, 100), (1, 1)])
def test_softmax_matches_reference(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    kernel = _make_softmax(dtype)
    x = (4 * torch.randn(shape, device=DEVICE)).to(dtype)
    out = sm_mod.softmax(x, kernel=kernel)
    assert out.shape == x.shape and out.dtype == dtype
    torch.testing.assert_close(out, sm_mod.softmax_reference(x), **TOL[dtype])


def test_softmax_strided_rows_and_record() -> None:
    kernel = _make_softmax(torch.float32)
    x = torch.randn(40, 9, device=DEVICE).t()  # 9 rows of 40, last dim strided: copied by the wrapper
    torch.testing.assert_close(sm_mod.softmax(x, kernel=kernel), sm_mod.softmax_reference(x), **TOL[torch.float32])
    _assert_tuned_every_config(kernel, (40, 16), sm_mod.CPU_SPACE)  # key: n_cols, next_power_of_2(n_rows)
    assert "BLOCK_SIZE" not in kernel.record((40, 16)).winner  # derived per call, not a space field


# --- matmul -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, BF16_NEEDS_GPU])
@pytest.mark.parametrize("mnk", [(37, 29, 45), (64, 48, 40), (1, 17, 3)])
def test_matmul_matches_reference(mnk: tuple[int, int, int], dtype: torch.dtype) -> None:
    M, N, K = mnk
    kernel = _make_matmul(dtype)
    a = torch.randn(M, K, device=DEVICE).to(dtype)
    b = torch.randn(K, N, device=DEVICE).to(dtype)
    c = mm_mod.matmul(a, b, kernel=kernel)
    assert c.shape == (M, N) and c.dtype == dtype
    torch.testing.assert_close(c, mm_mod.matmul_reference(a, b), **_mm_tol(dtype))


def test_matmul_two_shapes_two_keys() -> None:
    kernel = _make_matmul(torch.float16)
    shapes = [(37, 29, 45), (64, 48, 40)]
    for M, N, K in shapes:
        a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
        b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
        torch.testing.assert_close(
            mm_mod.matmul(a, b, kernel=kernel), mm_mod.matmul_reference(a, b), **TOL[torch.float16]
        )
    for key in shapes:
        _assert_tuned_every_config(kernel, key, mm_mod.CPU_SPACE)
    assert kernel.record(shapes[0]) is not kernel.record(shapes[1])
    assert kernel.best_config in set(mm_mod.CPU_SPACE)


def test_matmul_strided_operands() -> None:
    kernel = _make_matmul(torch.float32)
    a = torch.randn(45, 33, device=DEVICE)[::2]  # row stride 66
    b = torch.randn(50, 33, device=DEVICE).t()  # column-major (33, 50)
    torch.testing.assert_close(
        mm_mod.matmul(a, b, kernel=kernel), mm_mod.matmul_reference(a, b), **_mm_tol(torch.float32)
    )


def test_matmul_empty_k_and_bad_shapes() -> None:
    kernel = _make_matmul(torch.float32)
    c = mm_mod.matmul(torch.randn(3, 0), torch.randn(0, 5), kernel=kernel)
    assert torch.equal(c, torch.zeros(3, 5))
    with pytest.raises(ValueError, match="expected"):
        mm_mod.matmul(torch.randn(3, 4), torch.randn(5, 6), kernel=kernel)
    with pytest.raises(ValueError, match="dtype"):
        mm_mod.matmul(torch.randn(3, 4), torch.randn(4, 6, dtype=torch.float16), kernel=kernel)


# --- layer norm ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(5, 100), (2, 3, 50), (4, 1)])
def test_layer_norm_matches_reference(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    kernel = _make_layer_norm(dtype)
    n = shape[-1]
    x = (2 * torch.randn(shape, device=DEVICE) + 1).to(dtype)
    w = torch.randn(n, device=DEVICE).to(dtype)
    b = torch.randn(n, device=DEVICE).to(dtype)
    out = ln_mod.layer_norm(x, w, b, 1e-5, kernel=kernel)
    assert out.shape == x.shape and out.dtype == dtype
    torch.testing.assert_close(out, ln_mod.layer_norm_reference(x, w, b, 1e-5), **TOL[dtype])


def test_layer_norm_without_affine_and_record() -> None:
    kernel = _make_layer_norm(torch.float32)
    x = torch.randn(6, 77, device=DEVICE)
    torch.testing.assert_close(
        ln_mod.layer_norm(x, eps=1e-6, kernel=kernel), ln_mod.layer_norm_reference(x, eps=1e-6), **TOL[torch.float32]
    )
    _assert_tuned_every_config(kernel, (77,), ln_mod.CPU_SPACE)  # key: N


# --- the default (GPU-sized) spaces -------------------------------------------------------------------


def test_default_spaces_are_shaped_as_documented() -> None:
    assert len(add_mod.SPACE) == 8
    assert all(4 <= c.BLOCK_SIZE // (32 * c.num_warps) <= 16 for c in add_mod.SPACE)
    assert len(sm_mod.SPACE) == 15
    assert len(ln_mod.SPACE) == 17
    assert all(2 <= c.BLOCK_SIZE // (32 * c.num_warps) <= 16 for c in ln_mod.SPACE)
    assert len(mm_mod.SPACE) == 66
    for c in mm_mod.SPACE:
        assert c.BLOCK_M * c.BLOCK_N >= 256 * c.num_warps
        assert c.num_stages * (c.BLOCK_M + c.BLOCK_N) * c.BLOCK_K * 2 <= 96 * 1024
    for kernel in (add_mod.add_kernel, sm_mod.softmax_kernel, mm_mod.matmul_kernel, ln_mod.layer_norm_kernel):
        assert callable(kernel)


def test_default_add_instance_tunes_its_full_space() -> None:
    """The module-level instance over the GPU-sized SPACE (the only one quick enough for the interpreter)."""
    x = torch.randn(300, device=DEVICE)
    y = torch.randn(300, device=DEVICE)
    torch.testing.assert_close(add_mod.add(x, y), x + y, atol=0, rtol=0)
    _assert_tuned_every_config(add_mod.add_kernel, (512,), add_mod.SPACE)


@pytest.mark.gpu
def test_default_spaces_on_gpu() -> None:
    """Every config of every default space compiles, runs and is right on a real GPU."""
    torch.manual_seed(0)
    x = torch.randn(3000, device="cuda")
    torch.testing.assert_close(add_mod.add(x, x), x + x)
    _assert_tuned_every_config(add_mod.add_kernel, (4096,), add_mod.SPACE)
    s = torch.randn(300, 1000, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(sm_mod.softmax(s), sm_mod.softmax_reference(s), **TOL[torch.float16])
    _assert_tuned_every_config(sm_mod.softmax_kernel, (1000, 512), sm_mod.SPACE)
    a = torch.randn(500, 300, device="cuda", dtype=torch.float16)
    b = torch.randn(300, 700, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(mm_mod.matmul(a, b), mm_mod.matmul_reference(a, b), atol=5e-2, rtol=1e-2)
    _assert_tuned_every_config(mm_mod.matmul_kernel, (500, 700, 300), mm_mod.SPACE)
    h = torch.randn(64, 5000, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(5000, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(ln_mod.layer_norm(h, w, w), ln_mod.layer_norm_reference(h, w, w), **TOL[torch.bfloat16])
    _assert_tuned_every_config(ln_mod.layer_norm_kernel, (5000,), ln_mod.SPACE)
