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

from autotune import AutotuneError, NoValidConfigError, Reference, Tuning, VerificationWarning, autotune

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


def test_a_setup_that_raises_is_named_not_blamed_on_each_config():
    def broken_setup(x, y, out, n):
        raise KeyError("no such buffer")

    kernel = tuned(add_kernel, setup=broken_setup)
    x, y, out = torch.rand(256), torch.rand(256), torch.empty(256)
    with pytest.raises(AutotuneError, match=r"setup= \(broken_setup\) raised KeyError: 'no such buffer'.*fix setup="):
        kernel(x, y, out, 256)


def test_a_verify_that_raises_on_every_config_is_named_in_the_error():
    def broken_verify(x, y, out, n):
        return out.allclose(x + undefined)  # noqa: F821  (the user's bug)

    kernel = tuned(add_kernel, verify=broken_verify)
    x, y, out = torch.rand(256), torch.rand(256), torch.empty(256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VerificationWarning)
        with pytest.raises(NoValidConfigError, match=r"verify= \(broken_verify\) raised NameError"):
            kernel(x, y, out, 256)


def _asserts(x, y, out, n):
    assert torch.allclose(out, x + y), "wrong sum"
    return True


def _indexes(x, y, out, n):  # raises on a wrong config's output (an index past the table), as the config's failure
    table = torch.arange(n)
    return bool(table[(out - x - y).abs().gt(1e-6).long() * n].numel() > 0)


@pytest.mark.parametrize(
    ("sums", "said"), [(_asserts, "rejected the outputs (assert failed: wrong sum"), (_indexes, "raised IndexError")]
)
def test_a_verify_that_raises_on_a_wrong_config_rejects_it_with_a_warning(sums, said):

    kernel = tuned(add_wrong_when_64_kernel, verify=sums)
    x, y, out = torch.rand(256), torch.rand(256), torch.empty(256)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(x, y, out, 256)
    statuses = {t.config["BLOCK"]: t.status.value for t in kernel.record().trials}
    assert statuses == {32: "ok", 64: "verify_failed", 128: "ok"}
    assert any(issubclass(w.category, VerificationWarning) and said in str(w.message) for w in caught), [
        str(w.message) for w in caught
    ]
