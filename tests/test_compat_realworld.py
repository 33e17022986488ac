"""A migration trial on real-world `@triton.autotune` kernels: each runs under `triton.autotune` and under
`autotune.compat.autotune` (the one-import swap the README promises) and must give the same results, the same
winner for the same timings, the same benchmarked configs and the same `cache` keys.

Sources (kernels copied with shapes and configs shrunk to run in the interpreter; licences of the originals):
- triton-lang/triton python/tutorials/06-fused-attention.py @ 003da478d84f5bb0f51b3988cf0ea0bbe60282b7 (MIT):
  `_attn_fwd_tma`, host TensorDescriptors whose block shapes a config `pre_hook` sets, keys passed as keywords.
- triton-lang/triton python/tutorials/08-grouped-gemm.py @ 07538f85c5410fbba3efcd22bbdc11d7180cd4de (MIT):
  pointer tables, `key=['group_size']`, a grid of META only.
- state-spaces/mamba mamba_ssm/ops/triton/layer_norm.py @ 0f12d2c811687ebae68b1d9ef2dab5b1a91fce4e (Apache-2.0):
  `triton.heuristics` stacked below, configs of `num_warps` only, None arguments, positional bool keys.
- fla-org/flash-linear-attention fla/ops/utils/cumsum.py @ 033b00352a8075d9fa95fd8aa747a99215be22f9 (MIT):
  `triton.heuristics` stacked above, keyword-only launches, `cache_results=True`, `do_not_specialize`.
- facebookresearch/xformers xformers/ops/_triton/k_scaled_index_add.py @ 69faade0705c1e99160ccdb400429f2f3a22fbbb
  (BSD-3-Clause): an in-place kernel with `restore_value`, an optional (None) tensor argument.
- facebookresearch/xformers xformers/ops/_triton/tiled_matmul_kernels.py @ 2583317c70639177e848d22c4d845374d167404a
  (BSD-3-Clause) and its matmul_perf_model.py @ 5a74138b01d50b3f55ffc9bda5793c877d05c717 (MIT, from
  triton-lang/kernels): `prune_configs_by` with early_config_prune + perf_model + top_k, split-K configs whose
  `pre_hook` zeroes the outputs, a 9-name key, a `tl.dtype` launch argument. The device queries of
  early_config_prune are constants here and estimate_matmul_time is a CPU stand-in with its signature; before
  Ampere that early_config_prune sets `num_stages = 2` on a config in place.
- pytorch/FBGEMM fbgemm_gpu/experimental/gemm/triton_gemm/fp8_gemm.py @ 58046582650d52ff51050df4c202ceda92f41d81
  (BSD-3-Clause): its `prune_configs_by` dict with `"perf_model": None, "top_k": None` (on another kernel here).

Triton's default benchmarker needs a GPU, so both decorators get the same `do_bench`: it runs the config and
reports a fixed time per config, which it learns from a config `pre_hook` wrapped around the kernel's own.
"""

from __future__ import annotations

import heapq

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from side_by_side import DECORATORS, both, scripted_times
from triton.tools.tensor_descriptor import TensorDescriptor

from autotune import compat
from autotune.compat.options import ConfigChangedInPlace


def _config_id(config_kwargs):
    return tuple(sorted((k, str(v)) for k, v in config_kwargs.items()))


class Bench:
    """`do_bench(kernel_call, quantiles)`: runs the config twice, returns a time fixed by the config's values."""

    def __init__(self):
        self.current = None
        self.benched = []

    def __call__(self, kernel_call, quantiles):
        self.current = None
        kernel_call()
        kernel_call()
        assert self.current is not None, "the tagging pre_hook did not run"
        self.benched.append(self.current)
        return scripted_times(self.current)

    def tag(self, configs):
        """The configs, each with a pre_hook that tells this bench which one runs, then runs the config's own."""

        def tagged(config):
            def hook(nargs):
                self.current = _config_id(config.all_kwargs())
                if config.pre_hook is not None:
                    config.pre_hook(nargs)

            return triton.Config(
                dict(config.kwargs),
                num_warps=config.num_warps,
                num_stages=config.num_stages,
                num_ctas=config.num_ctas,
                maxnreg=config.maxnreg,
                pre_hook=hook,
            )

        return [tagged(c) for c in configs]


# ------------------------------------------------------------------------------------------------ tutorial 06
@triton.jit
def _attn_fwd_inner_tma(
    acc,
    l_i,
    m_i,
    q,
    desc_k,
    desc_v,
    offset_y,
    dtype: tl.constexpr,
    start_m,
    qk_scale,
    BLOCK_M: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STAGE: tl.constexpr,
    offs_m: tl.constexpr,
    offs_n: tl.constexpr,
    N_CTX: tl.constexpr,
):
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    offsetkv_y = offset_y + lo
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([offsetkv_y, 0]).T
        qk = tl.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = desc_v.load([offsetkv_y, 0])
        p = p.to(dtype)
        acc = tl.dot(p, v, acc)
        m_i = m_ij
        offsetkv_y += BLOCK_N
    return acc, l_i, m_i


def _attn_fwd_tma(
    sm_scale,
    M,
    Z,
    H,
    desc_q,
    desc_k,
    desc_v,
    desc_o,
    N_CTX,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FP8_OUTPUT: tl.constexpr,
    STAGE: tl.constexpr,
):
    dtype = tl.float8e5 if FP8_OUTPUT else tl.float16
    tl.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    offset_y = off_z + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale
    qk_scale *= 1.44269504
    q = desc_q.load([qo_offset_y, 0])
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner_tma(
            acc,
            l_i,
            m_i,
            q,
            desc_k,
            desc_v,
            offset_y,
            dtype,
            start_m,
            qk_scale,
            BLOCK_M,
            HEAD_DIM,
            BLOCK_N,
            4 - STAGE,
            offs_m,
            offs_n,
            N_CTX,
        )
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner_tma(
            acc,
            l_i,
            m_i,
            q,
            desc_k,
            desc_v,
            offset_y,
            dtype,
            start_m,
            qk_scale,
            BLOCK_M,
            HEAD_DIM,
            BLOCK_N,
            2,
            offs_m,
            offs_n,
            N_CTX,
        )
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    m_ptrs = M + off_hz * N_CTX + offs_m
    tl.store(m_ptrs, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(dtype))


def _attention_scenario(decorate):
    block_shapes_set = []

    def _tma_pre_hook(nargs):
        BLOCK_M, BLOCK_N, HEAD_DIM = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
        block_shapes_set.append((BLOCK_M, BLOCK_N))
        nargs["desc_q"].block_shape = [BLOCK_M, HEAD_DIM]
        nargs["desc_v"].block_shape = [BLOCK_N, HEAD_DIM]
        nargs["desc_k"].block_shape = [BLOCK_N, HEAD_DIM]
        nargs["desc_o"].block_shape = [BLOCK_M, HEAD_DIM]

    configs_tma = [
        triton.Config({"BLOCK_M": BM, "BLOCK_N": BN}, num_stages=s, num_warps=4, pre_hook=_tma_pre_hook)
        for BM in [16, 32]
        for BN in [16]
        for s in [2, 3]
    ]
    bench = Bench()
    kernel = decorate(configs=bench.tag(configs_tma), key=["N_CTX", "HEAD_DIM", "FP8_OUTPUT"], do_bench=bench)(
        triton.jit(_attn_fwd_tma)
    )
    torch.manual_seed(0)
    Z, H, N_CTX, HEAD_DIM, sm_scale = 1, 2, 32, 16, 0.5
    q, k, v = (torch.randn((Z, H, N_CTX, HEAD_DIM), dtype=torch.float16) * 0.5 for _ in range(3))
    o = torch.empty_like(q)
    M = torch.empty((Z, H, N_CTX), dtype=torch.float32)
    descs = [
        TensorDescriptor(t, shape=[Z * H * N_CTX, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[1, 1])
        for t in (q, k, v, o)
    ]
    grid = lambda META: (triton.cdiv(q.shape[2], META["BLOCK_M"]), q.shape[0] * q.shape[1], 1)  # noqa: E731
    kernel[grid](sm_scale, M, Z, H, *descs, N_CTX=N_CTX, HEAD_DIM=HEAD_DIM, FP8_OUTPUT=False, STAGE=3)
    p = torch.matmul(q.float(), k.float().transpose(2, 3)) * sm_scale
    p[:, :, torch.tril(torch.ones((N_CTX, N_CTX))) == 0] = float("-inf")
    assert torch.allclose(o.float(), torch.softmax(p, -1).half().float() @ v.float(), atol=1e-2)
    winner = (kernel.best_config.kwargs["BLOCK_M"], kernel.best_config.kwargs["BLOCK_N"])
    assert block_shapes_set[-1] == winner  # the final launch set the winner's block shapes
    assert descs[0].block_shape == [winner[0], HEAD_DIM]
    return {
        "winner": _config_id(kernel.best_config.all_kwargs()),
        "benched": sorted(bench.benched),
        "cache": [(key, _config_id(c.all_kwargs())) for key, c in kernel.cache.items()],
    }


def test_tutorial_fused_attention_with_descriptors_whose_block_shape_a_config_pre_hook_sets():
    seen = both(_attention_scenario)
    assert len(seen["benched"]) == 4
    assert [key for key, _ in seen["cache"]] == [(32, 16, False, "torch.float32")]  # descriptors have no dtype


# ------------------------------------------------------------------------------------------------ tutorial 08
def grouped_matmul_kernel(
    group_a_ptrs,
    group_b_ptrs,
    group_c_ptrs,
    group_gemm_sizes,
    g_lds,
    group_size,
    NUM_SM: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
):
    tile_idx = tl.program_id(0)
    last_problem_end = 0
    for g in range(group_size):
        gm = tl.load(group_gemm_sizes + g * 3)
        gn = tl.load(group_gemm_sizes + g * 3 + 1)
        gk = tl.load(group_gemm_sizes + g * 3 + 2)
        num_m_tiles = tl.cdiv(gm, BLOCK_SIZE_M)
        num_n_tiles = tl.cdiv(gn, BLOCK_SIZE_N)
        num_tiles = num_m_tiles * num_n_tiles
        while tile_idx >= last_problem_end and tile_idx < last_problem_end + num_tiles:
            k = gk
            lda = tl.load(g_lds + g * 3)
            ldb = tl.load(g_lds + g * 3 + 1)
            ldc = tl.load(g_lds + g * 3 + 2)
            a_ptr = tl.load(group_a_ptrs + g).to(tl.pointer_type(tl.float16))
            b_ptr = tl.load(group_b_ptrs + g).to(tl.pointer_type(tl.float16))
            c_ptr = tl.load(group_c_ptrs + g).to(tl.pointer_type(tl.float16))
            tile_idx_in_gemm = tile_idx - last_problem_end
            tile_m_idx = tile_idx_in_gemm // num_n_tiles
            tile_n_idx = tile_idx_in_gemm % num_n_tiles
            offs_am = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_bn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            offs_k = tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + offs_am[:, None] * lda + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * ldb + offs_bn[None, :]
            accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for kk in range(0, tl.cdiv(k, BLOCK_SIZE_K)):  # noqa: B007 (the kernel as its authors wrote it)
                tl.multiple_of(a_ptrs, [16, 16])
                tl.multiple_of(b_ptrs, [16, 16])
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
                accumulator += tl.dot(a, b)
                a_ptrs += BLOCK_SIZE_K
                b_ptrs += BLOCK_SIZE_K * ldb
            c = accumulator.to(tl.float16)
            offs_cm = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_cn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            c_ptrs = c_ptr + ldc * offs_cm[:, None] + offs_cn[None, :]
            tl.store(c_ptrs, c)
            tile_idx += NUM_SM
        last_problem_end = last_problem_end + num_tiles


def _grouped_gemm_scenario(decorate):
    configs = [
        triton.Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bm, "BLOCK_SIZE_K": 16, "NUM_SM": sm})
        for bm in (16, 32)
        for sm in (2, 4)
    ]
    bench = Bench()
    kernel = decorate(configs=bench.tag(configs), key=["group_size"], do_bench=bench)(triton.jit(grouped_matmul_kernel))
    torch.manual_seed(0)
    group_A = [torch.rand((d, d), dtype=torch.float16) for d in (32, 64)]
    group_B = [torch.rand((d, d), dtype=torch.float16) for d in (32, 64)]
    group_C = [torch.empty((d, d), dtype=torch.float16) for d in (32, 64)]
    pointers = [torch.tensor([t.data_ptr() for t in ts]) for ts in (group_A, group_B, group_C)]
    sizes = torch.tensor([s for a in group_A for s in (a.shape[0], a.shape[1], a.shape[1])], dtype=torch.int32)
    lds = torch.tensor([a.stride(0) for a in group_A for _ in range(3)], dtype=torch.int32)
    kernel[lambda META: (META["NUM_SM"],)](*pointers, sizes, lds, len(group_A))
    for a, b, c in zip(group_A, group_B, group_C):
        assert torch.allclose((a.float() @ b.float()).half(), c, atol=1e-1, rtol=1e-2)
    return {
        "winner": _config_id(kernel.best_config.all_kwargs()),
        "benched": sorted(bench.benched),
        "cache": list(kernel.cache),
        "timings": sorted(map(str, kernel.configs_timings.values())),
    }


def test_tutorial_grouped_gemm_keyed_on_group_size_with_a_grid_of_meta_only():
    seen = both(_grouped_gemm_scenario)
    assert seen["cache"] == [(2, "torch.int64", "torch.int64", "torch.int64", "torch.int32", "torch.int32")]


# ------------------------------------------------------------------------------------------------ mamba layer norm
def _layer_norm_fwd_1pass_kernel(
    X,
    Y,
    W,
    B,
    RESIDUAL,
    X1,
    W1,
    B1,
    Y1,
    RESIDUAL_OUT,
    ROWSCALE,
    SEEDS,
    DROPOUT_MASK,
    Mean,
    Rstd,
    stride_x_row,
    stride_y_row,
    stride_res_row,
    stride_res_out_row,
    stride_x1_row,
    stride_y1_row,
    M,
    N,
    eps,
    dropout_p,
    IS_RMS_NORM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    STORE_RESIDUAL_OUT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    STORE_DROPOUT_MASK: tl.constexpr,
    HAS_ROWSCALE: tl.constexpr,
    HAS_X1: tl.constexpr,
    HAS_W1: tl.constexpr,
    HAS_B1: tl.constexpr,
):
    # the kernel as in mamba, less its dropout / rowscale / x1 branches (the trial passes None for those)
    row = tl.program_id(0)
    X += row * stride_x_row
    Y += row * stride_y_row
    if HAS_RESIDUAL:
        RESIDUAL += row * stride_res_row
    if STORE_RESIDUAL_OUT:
        RESIDUAL_OUT += row * stride_res_out_row
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        residual = tl.load(RESIDUAL + cols, mask=cols < N, other=0.0).to(tl.float32)
        x += residual
    if STORE_RESIDUAL_OUT:
        tl.store(RESIDUAL_OUT + cols, x, mask=cols < N)
    if not IS_RMS_NORM:
        mean = tl.sum(x, axis=0) / N
        tl.store(Mean + row, mean)
        xbar = tl.where(cols < N, x - mean, 0.0)
        var = tl.sum(xbar * xbar, axis=0) / N
    else:
        xbar = tl.where(cols < N, x, 0.0)
        var = tl.sum(xbar * xbar, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Rstd + row, rstd)
    mask = cols < N
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    if HAS_BIAS:
        b = tl.load(B + cols, mask=mask).to(tl.float32)
    x_hat = (x - mean) * rstd if not IS_RMS_NORM else x * rstd
    y = x_hat * w + b if HAS_BIAS else x_hat * w
    tl.store(Y + cols, y, mask=mask)


def _layer_norm_scenario(decorate):
    bench = Bench()
    kernel = triton.jit(_layer_norm_fwd_1pass_kernel)
    for name, arg in (("HAS_B1", "B1"), ("HAS_W1", "W1"), ("HAS_X1", "X1")):
        kernel = triton.heuristics({name: lambda args, arg=arg: args[arg] is not None})(kernel)
    kernel = decorate(
        configs=bench.tag([triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)]),
        key=["N", "HAS_RESIDUAL", "STORE_RESIDUAL_OUT", "IS_RMS_NORM", "HAS_BIAS"],
        do_bench=bench,
    )(kernel)
    torch.manual_seed(0)
    x, w, b, res = torch.randn(8, 48), torch.randn(48), torch.randn(48), torch.randn(8, 48)

    def fwd(bias, residual, is_rms_norm):
        M, N = x.shape
        y = torch.empty_like(x)
        residual_out = torch.empty(M, N) if residual is not None else None
        mean = torch.empty((M,)) if not is_rms_norm else None
        rstd = torch.empty((M,))
        kernel[(M,)](
            x,
            y,
            w,
            bias,
            residual,
            None,
            None,
            None,
            None,
            residual_out,
            None,
            None,
            None,
            mean,
            rstd,
            x.stride(0),
            y.stride(0),
            residual.stride(0) if residual is not None else 0,
            residual_out.stride(0) if residual_out is not None else 0,
            0,
            0,
            M,
            N,
            1e-6,
            0.0,
            is_rms_norm,
            triton.next_power_of_2(N),
            residual is not None,
            residual_out is not None,
            bias is not None,
            False,
            False,
            False,
        )
        return y, residual_out

    y, _ = fwd(b, None, False)
    assert torch.allclose(y, F.layer_norm(x, (48,), w, b, 1e-6), atol=1e-4)
    y, residual_out = fwd(None, res, True)
    xr = x + res
    assert torch.allclose(residual_out, xr)
    assert torch.allclose(y, xr * torch.rsqrt(xr.square().mean(-1, keepdim=True) + 1e-6) * w, atol=1e-4)
    return {
        "winner": _config_id(kernel.best_config.all_kwargs()),
        "benched": sorted(bench.benched),
        "cache": sorted(map(str, kernel.cache)),
    }


def test_mamba_layer_norm_with_heuristics_below_none_arguments_and_positional_bool_keys():
    seen = both(_layer_norm_scenario)
    assert len(seen["cache"]) == 2 and len(seen["benched"]) == 8


# ------------------------------------------------------------------------------------------------ fla cumsum
def chunk_local_cumsum_vector_kernel(
    s,
    o,
    scale,
    cu_seqlens,
    chunk_indices,
    T,
    B: tl.constexpr,
    H: tl.constexpr,
    S: tl.constexpr,
    BT: tl.constexpr,
    BS: tl.constexpr,
    REVERSE: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    HEAD_FIRST: tl.constexpr,
):
    i_s, i_t, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2).to(tl.int64)
    i_b, i_h = i_bh // H, i_bh % H
    if IS_VARLEN:
        i_n, i_t = tl.load(chunk_indices + i_t * 2).to(tl.int32), tl.load(chunk_indices + i_t * 2 + 1).to(tl.int64)
        bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64), tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        boh = i_h * T + bos
        T = eos - bos
    else:
        bos, eos = i_b * T, i_b * T + T
        boh = bos * H + i_h * T
    o_t = i_t * BT + tl.arange(0, BT)
    o_s = i_s * BS + tl.arange(0, BS)
    m_s = (o_t[:, None] < T) & (o_s[None, :] < S)
    if HEAD_FIRST:
        p_s = s + boh * S + o_t[:, None] * S + o_s[None, :]
        p_o = o + boh * S + o_t[:, None] * S + o_s[None, :]
    else:
        p_s = s + (bos * H + i_h) * S + o_t[:, None] * (H * S) + o_s[None, :]
        p_o = o + (bos * H + i_h) * S + o_t[:, None] * (H * S) + o_s[None, :]
    b_s = tl.load(p_s, mask=m_s, other=0.0).to(tl.float32)
    if REVERSE:
        b_o = tl.cumsum(b_s, axis=0, reverse=True)
    else:
        b_o = tl.cumsum(b_s, axis=0)
    if HAS_SCALE:
        b_o *= scale
    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_s)


def _cumsum_scenario(decorate):
    bench = Bench()
    heuristics = triton.heuristics(
        {"HAS_SCALE": lambda args: args["scale"] is not None, "IS_VARLEN": lambda args: args["cu_seqlens"] is not None}
    )
    configs = [triton.Config({"BS": BS}, num_warps=num_warps) for BS in [8, 16] for num_warps in [2, 4]]
    kernel = heuristics(
        decorate(
            configs=bench.tag(configs),
            key=["B", "H", "S", "BT", "IS_VARLEN", "REVERSE"],
            cache_results=True,
            do_bench=bench,
        )(triton.jit(do_not_specialize=["T"])(chunk_local_cumsum_vector_kernel))
    )
    torch.manual_seed(0)
    B, H, S, BT = 2, 2, 16, 8
    for T, scale, reverse in ((24, None, False), (40, 0.5, False), (24, None, True)):
        g = torch.randn(B, T, H, S)
        out = torch.empty_like(g)
        NT = triton.cdiv(T, BT)

        def grid(meta):
            return (triton.cdiv(meta["S"], meta["BS"]), NT, B * H)  # noqa: B023 (launched at once)

        kernel[grid](
            s=g,
            o=out,
            scale=scale,
            cu_seqlens=None,
            chunk_indices=None,
            T=T,
            B=B,
            H=H,
            S=S,
            BT=BT,
            HEAD_FIRST=False,
            REVERSE=reverse,
        )
        chunks = g.view(B, NT, BT, H, S)
        ref = (chunks.flip(2).cumsum(2).flip(2) if reverse else chunks.cumsum(2)).view(B, T, H, S)
        assert torch.allclose(out, ref * (scale or 1.0), atol=1e-5)
    return {
        "winner": _config_id(kernel.fn.best_config.all_kwargs()),
        "benched": sorted(bench.benched),
        "cache": sorted(map(str, kernel.fn.cache)),
    }


def test_fla_cumsum_under_heuristics_launched_with_keywords_only_keys_on_heuristic_values():
    seen = both(_cumsum_scenario)
    assert seen["cache"] == [
        "(2, 2, 16, 8, False, False, 'torch.float32', 'torch.float32')",
        "(2, 2, 16, 8, False, True, 'torch.float32', 'torch.float32')",
    ]  # T is not a key
    assert len(seen["benched"]) == 8


# ------------------------------------------------------------------------------------------------ xformers index_add
def scaled_index_add_fwd_kernel(
    input_ptr,
    index_ptr,
    source_ptr,
    scaling_ptr,
    alpha,
    num_inp_indices,
    num_src_indices,
    num_rows,
    num_cols,
    stride0,
    stride1,
    stride2,
    BLOCK_SIZE_INDEX: tl.constexpr,
    BLOCK_SIZE_ROW: tl.constexpr,
    BLOCK_SIZE_COL: tl.constexpr,
    HAS_SCALING: tl.constexpr,
):
    pid0 = tl.program_id(axis=0)
    pid1 = tl.program_id(axis=1)
    pid2 = tl.program_id(axis=2)
    rows = pid1 * BLOCK_SIZE_ROW + tl.arange(0, BLOCK_SIZE_ROW)
    cols = pid2 * BLOCK_SIZE_COL + tl.arange(0, BLOCK_SIZE_COL)
    source_indices = pid0 * BLOCK_SIZE_INDEX + tl.arange(0, BLOCK_SIZE_INDEX)
    source_offsets = (
        source_ptr
        + source_indices[:, None, None] * stride0
        + rows[None, :, None] * stride1
        + cols[None, None, :] * stride2
    )
    source_mask = (
        (source_indices[:, None, None] < num_src_indices)
        & (rows[None, :, None] < num_rows)
        & (cols[None, None, :] < num_cols)
    )
    source = tl.load(source_offsets, mask=source_mask).to(tl.float32)
    input_indices = tl.load(index_ptr + source_indices, mask=(source_indices < num_src_indices))
    input_offsets = (
        input_ptr
        + input_indices[:, None, None] * stride0
        + rows[None, :, None] * stride1
        + cols[None, None, :] * stride2
    )
    x = tl.load(input_offsets, mask=source_mask).to(tl.float32)
    if HAS_SCALING:
        scaling = tl.load(scaling_ptr + cols[None, None, :] * stride2, mask=(cols[None, None, :] < num_cols)).to(
            tl.float32
        )
        tl.store(input_offsets, x + alpha * scaling * source, mask=source_mask)
    else:
        tl.store(input_offsets, x + alpha * source, mask=source_mask)


def _index_add_scenario(decorate):
    bench = Bench()
    configs = [
        triton.Config({"BLOCK_SIZE_INDEX": bi, "BLOCK_SIZE_ROW": br, "BLOCK_SIZE_COL": 16}, num_warps=2)
        for bi in (1, 4)
        for br in (1, 4)
    ]
    kernel = decorate(
        configs=bench.tag(configs),
        key=["num_src_indices", "num_rows", "num_cols"],
        restore_value=["input_ptr"],
        do_bench=bench,
    )(triton.jit(scaled_index_add_fwd_kernel))
    torch.manual_seed(0)
    x, source = torch.randn(10, 6, 20), torch.randn(5, 6, 20)
    index, scaling = torch.tensor([0, 3, 4, 7, 9]), torch.randn(20)
    for scale, alpha in ((None, 0.5), (scaling, 2.0)):
        expected = x.clone()
        expected[index] += alpha * (scale if scale is not None else 1.0) * source

        def grid(meta):
            return (
                triton.cdiv(5, meta["BLOCK_SIZE_INDEX"]),
                triton.cdiv(6, meta["BLOCK_SIZE_ROW"]),
                triton.cdiv(20, meta["BLOCK_SIZE_COL"]),
            )

        kernel[grid](
            x,
            index,
            source,
            scale,
            alpha,
            10,
            5,
            6,
            20,
            x.stride(0),
            x.stride(1),
            x.stride(2),
            HAS_SCALING=scale is not None,
        )
        assert torch.allclose(x, expected, atol=1e-5)  # tuning ran it 4 x 2 times: restore_value undid those
    return {
        "winner": _config_id(kernel.best_config.all_kwargs()),
        "benched": sorted(bench.benched),
        "cache": sorted(map(str, kernel.cache)),
    }


def test_xformers_in_place_scaled_index_add_restores_its_input_while_tuning():
    seen = both(_index_add_scenario)
    assert len(seen["cache"]) == 2  # scaling None and a tensor: one more dtype in the second key


# ------------------------------------------------------------------------------------------------ xformers tiled matmul
def _init_to_zero(*names):
    def result(nargs):
        for name in names:
            nargs[name].zero_()

    return result


def _gen_config(block_m, block_n, block_k, stages, warps, split_k=1, group_m=8):
    return triton.Config(
        {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split_k, "GROUP_M": group_m},
        num_stages=stages,
        num_warps=warps,
        pre_hook=_init_to_zero(*[f"C{i + 1}{j + 1}" for i in range(3) for j in range(3)])
        if split_k > 1
        else _init_to_zero(),
    )


def _estimate_matmul_time(
    num_warps, num_stages, A, B, C, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, debug=False, **kwargs
):
    """CPU stand-in for matmul_perf_model.estimate_matmul_time (which queries the GPU), same signature."""
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    return tiles * triton.cdiv(K, BLOCK_K * SPLIT_K) + 0.3 * SPLIT_K + 0.01 * num_stages + 0.001 * num_warps


def _early_config_prune(configs, named_args, capability, **kwargs):
    """matmul_perf_model.early_config_prune with the device's capability given and its shared memory a constant."""
    dtsize = named_args["A"].element_size()
    dtype = named_args["A"].dtype
    pruned_configs = []
    for config in configs:
        kw = config.kwargs
        required_shared_memory = (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * config.num_stages * dtsize
        if required_shared_memory <= 101376:
            pruned_configs.append(config)
    configs = pruned_configs
    if dtype not in [torch.float16, torch.float32]:
        configs = [config for config in configs if config.kwargs["SPLIT_K"] == 1]
    configs_map = {}
    for config in configs:
        kw = config.kwargs
        key = (kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], kw["SPLIT_K"], config.num_warps)
        configs_map.setdefault(key, []).append((config, config.num_stages))
    pruned_configs = []
    for k, v in configs_map.items():
        BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps = k
        if capability[0] >= 8:
            mmas = BLOCK_M * BLOCK_N * BLOCK_K / (16 * 8 * 16)
            mma_cycles = mmas / min(4, num_warps) * 8
            optimal_num_stages = 300 / mma_cycles
            nearest = heapq.nsmallest(
                2,
                v,
                key=lambda x: (
                    10 + abs(x[1] - optimal_num_stages)
                    if (x[1] - optimal_num_stages) < 0
                    else x[1] - optimal_num_stages
                ),
            )
            for n in nearest:
                pruned_configs.append(n[0])
        else:  # Volta & Turing only supports num_stages <= 2
            random_config = v[0][0]
            random_config.num_stages = 2
            pruned_configs.append(random_config)
    return pruned_configs


def our_estimate_matmul_time(A11, B11, C11, M1, M2, M3, N1, N2, N3, K1, K2, K3, **kwargs):
    return _estimate_matmul_time(M=M1 + M2 + M3, N=N1 + N2 + N3, K=K1 + K2 + K3, A=A11, B=B11, C=C11, **kwargs)


def _our_early_config_prune(config, named_args, capability, **kwargs):
    new_named_args = named_args.copy()
    new_named_args["M"] = named_args["M1"] + named_args["M2"] + named_args["M3"]
    new_named_args["N"] = named_args["N1"] + named_args["N2"] + named_args["N3"]
    new_named_args["K"] = named_args["K1"] + named_args["K2"] + named_args["K3"]
    new_named_args["A"] = named_args["A11"]
    new_named_args["B"] = named_args["B11"]
    new_named_args["C"] = named_args["C11"]
    return _early_config_prune(config, new_named_args, capability, **kwargs)


def _xformers_tiled_matmul_kernel(
    A11,
    A12,
    A13,
    A21,
    A22,
    A23,
    A31,
    A32,
    A33,
    B11,
    B12,
    B13,
    B21,
    B22,
    B23,
    B31,
    B32,
    B33,
    C11,
    C12,
    C13,
    C21,
    C22,
    C23,
    C31,
    C32,
    C33,
    M1,
    M2,
    M3,
    N1,
    N2,
    N3,
    K1,
    K2,
    K3,
    stride_am1,
    stride_am2,
    stride_am3,
    stride_ak1,
    stride_ak2,
    stride_ak3,
    stride_bk1,
    stride_bk2,
    stride_bk3,
    stride_bn1,
    stride_bn2,
    stride_bn3,
    stride_cm1,
    stride_cm2,
    stride_cm3,
    stride_cn1,
    stride_cn2,
    stride_cn3,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    ACC_TYPE: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    grid_m1 = tl.cdiv(M1, BLOCK_M)
    grid_m2 = tl.cdiv(M2, BLOCK_M)
    grid_m3 = tl.cdiv(M3, BLOCK_M)
    grid_n1 = tl.cdiv(N1, BLOCK_N)
    grid_n2 = tl.cdiv(N2, BLOCK_N)
    grid_n3 = tl.cdiv(N3, BLOCK_N)
    grid_m = grid_m1 + grid_m2 + grid_m3
    grid_n = grid_n1 + grid_n2 + grid_n3
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // (group_size)
    A1 = tl.where(pid_m < grid_m1, A11, tl.where(pid_m < grid_m1 + grid_m2, A21, A31))
    A2 = tl.where(pid_m < grid_m1, A12, tl.where(pid_m < grid_m1 + grid_m2, A22, A32))
    A3 = tl.where(pid_m < grid_m1, A13, tl.where(pid_m < grid_m1 + grid_m2, A23, A33))
    B1 = tl.where(pid_n < grid_n1, B11, tl.where(pid_n < grid_n1 + grid_n2, B12, B13))
    B2 = tl.where(pid_n < grid_n1, B21, tl.where(pid_n < grid_n1 + grid_n2, B22, B23))
    B3 = tl.where(pid_n < grid_n1, B31, tl.where(pid_n < grid_n1 + grid_n2, B32, B33))
    C = tl.where(
        pid_m < grid_m1,
        tl.where(pid_n < grid_n1, C11, tl.where(pid_n < grid_n1 + grid_n2, C12, C13)),
        tl.where(
            pid_m < grid_m1 + grid_m2,
            tl.where(pid_n < grid_n1, C21, tl.where(pid_n < grid_n1 + grid_n2, C22, C23)),
            tl.where(pid_n < grid_n1, C31, tl.where(pid_n < grid_n1 + grid_n2, C32, C33)),
        ),
    )
    M = tl.where(pid_m < grid_m1, M1, tl.where(pid_m < grid_m1 + grid_m2, M2, M3))
    N = tl.where(pid_n < grid_n1, N1, tl.where(pid_n < grid_n1 + grid_n2, N2, N3))
    stride_ak = tl.where(pid_m < grid_m1, stride_ak1, tl.where(pid_m < grid_m1 + grid_m2, stride_ak2, stride_ak3))
    stride_bk = tl.where(pid_n < grid_n1, stride_bk1, tl.where(pid_n < grid_n1 + grid_n2, stride_bk2, stride_bk3))
    stride_cn = tl.where(pid_m < grid_m1, stride_cn1, tl.where(pid_m < grid_m1 + grid_m2, stride_cn2, stride_cn3))
    stride_cm = tl.where(pid_n < grid_n1, stride_cm1, tl.where(pid_n < grid_n1 + grid_n2, stride_cm2, stride_cm3))
    pid_m = tl.where(
        pid_m < grid_m1, pid_m, tl.where(pid_m < grid_m1 + grid_m2, pid_m - grid_m1, pid_m - grid_m1 - grid_m2)
    )
    pid_n = tl.where(
        pid_n < grid_n1, pid_n, tl.where(pid_n < grid_n1 + grid_n2, pid_n - grid_n1, pid_n - grid_n1 - grid_n2)
    )
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    grid_k1 = tl.cdiv(K1, BLOCK_K)
    grid_k2 = tl.cdiv(K2, BLOCK_K)
    grid_k3 = tl.cdiv(K3, BLOCK_K)
    for tile in range(pid_k, grid_k1 + grid_k2 + grid_k3, SPLIT_K):
        A = tl.where(tile < grid_k1, A1, tl.where(tile < grid_k1 + grid_k2, A2, A3))
        B = tl.where(tile < grid_k1, B1, tl.where(tile < grid_k1 + grid_k2, B2, B3))
        K = tl.where(tile < grid_k1, K1, tl.where(tile < grid_k1 + grid_k2, K2, K3))
        stride_am = tl.where(tile < grid_k1, stride_am1, tl.where(tile < grid_k1 + grid_k2, stride_am2, stride_am3))
        stride_bn = tl.where(tile < grid_k1, stride_bn1, tl.where(tile < grid_k1 + grid_k2, stride_bn2, stride_bn3))
        my_tile = tl.where(
            tile < grid_k1, tile, tl.where(tile < grid_k1 + grid_k2, tile - grid_k1, tile - grid_k1 - grid_k2)
        )
        rk = my_tile * BLOCK_K + tl.arange(0, BLOCK_K)
        Ain = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak)
        Bin = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn)
        if EVEN_K:
            a = tl.load(Ain)
            b = tl.load(Bin)
        else:
            a = tl.load(Ain, mask=rk[None, :] < K, other=0.0)
            b = tl.load(Bin, mask=rk[:, None] < K, other=0.0)
        acc += tl.dot(a, b, allow_tf32=False)
    acc = acc.to(C.dtype.element_ty)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    C = C + (rm[:, None] * stride_cm + rn[None, :] * stride_cn)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    if SPLIT_K == 1:
        tl.store(C, acc, mask=mask)
    else:
        tl.atomic_add(C, acc, mask=mask)


def _tiled_matmul_scenario(decorate, capability):
    bench = Bench()
    configs = bench.tag(
        [_gen_config(16, 16, 16, s, 2, split_k=k) for k in (1, 2) for s in (2, 3, 4)] + [_gen_config(32, 16, 16, 3, 4)]
    )
    even_k = triton.heuristics(
        {
            "EVEN_K": lambda args: all(
                k % (args["BLOCK_K"] * args["SPLIT_K"]) == 0 for k in [args["K1"], args["K2"], args["K3"]]
            )
        }
    )
    kernel = decorate(
        configs=configs,
        key=["M1", "M2", "M3", "N1", "N2", "N3", "K1", "K2", "K3"],
        prune_configs_by={
            "early_config_prune": lambda c, n, **kw: _our_early_config_prune(c, n, capability, **kw),
            "perf_model": our_estimate_matmul_time,
            "top_k": 3,
        },
        do_bench=bench,
    )(even_k(triton.jit(_xformers_tiled_matmul_kernel)))
    torch.manual_seed(0)
    # xformers' _launch_triton_matmul for a 2 x 1 tiling of A and C: its _get_strides gives these strides
    a, b = [torch.randn(16, 32), torch.randn(16, 32)], torch.randn(32, 16)
    for _ in range(2):  # tuning, then a cache hit: the split-K winner's pre_hook zeroes C before each launch
        c = [torch.full((16, 16), 7.0), torch.full((16, 16), 7.0)]

        def grid(META):
            return (2 * triton.cdiv(16, META["BLOCK_M"]) * triton.cdiv(16, META["BLOCK_N"]), META["SPLIT_K"])

        kernel[grid](
            *[a[min(i, 1)] for i in range(3) for _ in range(3)],
            *[b] * 9,
            *[c[min(i, 1)] for i in range(3) for _ in range(3)],
            16,
            16,
            0,
            16,
            0,
            0,
            32,
            0,
            0,
            32,
            0,
            0,
            1,
            1,
            1,
            16,
            0,
            0,
            1,
            1,
            1,
            16,
            0,
            0,
            1,
            1,
            1,
            ACC_TYPE=tl.float32,
        )
        for a_i, c_i in zip(a, c):
            assert torch.allclose(c_i, a_i @ b, atol=1e-3)
    return {
        "winner": _config_id(kernel.best_config.all_kwargs()),
        "benched": sorted(bench.benched),
        "stages": [config.num_stages for config in kernel.configs],
        "cache": [(key, _config_id(config.all_kwargs())) for key, config in kernel.cache.items()],
    }


@pytest.mark.parametrize("capability", [(8, 0), (7, 0)], ids=["ampere", "volta-changes-a-config-in-place"])
def test_xformers_tiled_matmul_pruned_by_the_perf_model_and_split_k_zeroed_by_its_configs_pre_hook(capability):
    seen = both(_tiled_matmul_scenario, capability)
    assert len(seen["benched"]) == 3  # top_k of what early_config_prune kept
    assert dict(seen["winner"])["SPLIT_K"] == "2"  # a split-K winner: wrong sums unless its pre_hook zeroes C
    if capability < (8, 0):
        assert seen["stages"][-1] == 2 and dict(seen["winner"])["num_stages"] == "2"


def test_a_config_that_early_config_prune_keeps_changing_in_place_is_an_error_naming_it():
    def prune(configs, named_args, **kwargs):
        configs[1].num_stages += 1  # a new value on every call
        return configs[1:]

    configs = [triton.Config({"BLOCK_SIZE_INDEX": 1, "BLOCK_SIZE_ROW": r, "BLOCK_SIZE_COL": 16}) for r in (1, 2, 4)]
    kernel = compat.autotune(
        configs=configs, key=["num_rows"], restore_value=["input_ptr"], prune_configs_by={"early_config_prune": prune}
    )(triton.jit(scaled_index_add_fwd_kernel))
    x = torch.zeros(4, 2, 16)
    with pytest.raises(ConfigChangedInPlace, match=r"changed configs\[1\] in place"):
        kernel[(4, 2, 1)](
            x, torch.arange(4), torch.ones(4, 2, 16), None, 1.0, 4, 4, 2, 16, *x.stride(), HAS_SCALING=False
        )


# ------------------------------------------------------------------------------------------------ fbgemm's prune dict
@pytest.mark.parametrize("decorate", list(DECORATORS.values()), ids=list(DECORATORS))
def test_prune_configs_by_with_perf_model_and_top_k_none_as_fbgemm_writes_it(decorate):
    """pytorch/FBGEMM fbgemm_gpu/experimental/gemm/triton_gemm/fp8_gemm.py @ 58046582650d52ff51050df4c202ceda92f41d81
    (BSD-3-Clause) decorates its FP8 matmuls with `prune_configs_by={"early_config_prune": prune_configs,
    "perf_model": None, "top_k": None}`: Triton reads top_k only with a perf model, so this is accepted."""
    pruned = []

    def prune_configs(configs, named_args, **kwargs):
        pruned.append(len(configs))
        return [c for c in configs if c.kwargs["BLOCK_SIZE_ROW"] <= named_args["num_rows"]]

    bench = Bench()
    configs = [triton.Config({"BLOCK_SIZE_INDEX": 1, "BLOCK_SIZE_ROW": r, "BLOCK_SIZE_COL": 16}) for r in (1, 2, 8)]
    kernel = decorate(
        configs=bench.tag(configs),
        key=["num_rows"],
        restore_value=["input_ptr"],
        do_bench=bench,
        prune_configs_by={"early_config_prune": prune_configs, "perf_model": None, "top_k": None},
    )(triton.jit(scaled_index_add_fwd_kernel))
    x = torch.zeros(4, 2, 16)
    kernel[(4, 2, 1)](x, torch.arange(4), torch.ones(4, 2, 16), None, 1.0, 4, 4, 2, 16, *x.stride(), HAS_SCALING=False)
    assert torch.equal(x, torch.ones(4, 2, 16))
    assert pruned == [3] and len(bench.benched) == 2
    with pytest.raises(TypeError, match="top_k"):  # with a perf model, top_k None is Triton's TypeError too
        decorate(configs=configs, key=["num_rows"], prune_configs_by={"perf_model": lambda **kw: 0, "top_k": None})(
            triton.jit(scaled_index_add_fwd_kernel)
        )[(4, 2, 1)](x, torch.arange(4), torch.ones(4, 2, 16), None, 1.0, 4, 4, 2, 16, *x.stride(), HAS_SCALING=False)
