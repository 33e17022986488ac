"""Review fixes of a tuning's hooks: a `setup=` that prepares a checked output is what the kernel sees (the outputs
are filled before it, not after), a `setup=` or `verify=` that raises is named as such instead of failing each
config, and a `verify=` that asserts rejects its config as wrong. Real kernels through the interpreter."""

from __future__ import annotations

import warnings

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel, add_wrong_when_64_kernel

from autotune import AutotuneError, Reference, Tuning, VerificationWarning, autotune

FAST = Tuning(preset="fast", compile_workers=0)


@triton.jit
def accumulate(x, acc, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(acc + offs, tl.load(acc + offs, mask=m) + tl.load(x + offs, mask=m), mask=m)


def tuned(kernel, **options):
    return autotune(space={"BLOCK": (32, 64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST, **options)(
        kernel
    )


def test_a_setup_that_zeroes_a_checked_output_is_what_each_config_runs_on():
    def zero_acc(x, acc, n):
        acc.zero_()

    kernel = tuned(accumulate, setup=zero_acc, verify=Reference(lambda x, acc, n: x.clone(), outputs=("acc",)))
    x, acc = torch.arange(256, dtype=torch.float32), torch.zeros(256)
    kernel(x, acc, 256)
    assert all(t.ok for t in kernel.record().trials)


def broken_setup(x, y, out, n):
    raise KeyError("no such buffer")


def broken_verify(x, y, out, n):
    return out.allclose(x + undefined)  # noqa: F821  (the user's bug)


@pytest.mark.parametrize(
    ("hook", "said"),
    [
        ({"setup": broken_setup}, r"setup= \(broken_setup\) raised KeyError: 'no such buffer'.*fix setup="),
        ({"verify": broken_verify}, r"verify= \(broken_verify\) raised NameError.*fix verify="),
    ],
)
def test_a_hook_that_raises_is_named_not_blamed_on_each_config(hook, said):
    kernel = tuned(add_kernel, **hook)
    x, y, out = torch.rand(256), torch.rand(256), torch.empty(256)
    with pytest.raises(AutotuneError, match=said):
        kernel(x, y, out, 256)


def test_a_verify_that_asserts_rejects_its_config_as_wrong_with_a_warning():
    def sums(x, y, out, n):
        assert torch.allclose(out, x + y), "wrong sum"
        return True

    kernel = tuned(add_wrong_when_64_kernel, verify=sums)
    x, y, out = torch.rand(256), torch.rand(256), torch.empty(256)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(x, y, out, 256)
    statuses = {t.config["BLOCK"]: t.status.value for t in kernel.record().trials}
    assert statuses == {32: "ok", 64: "verify_failed", 128: "ok"}
    assert any(issubclass(w.category, VerificationWarning) and "wrong sum" in str(w.message) for w in caught)
