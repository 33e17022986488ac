"""Two review leftovers: a launch grid a tuning worker cannot import is blamed by name (not the kernel's loading), and
a callable `kernel[grid]` giving a negative size on a miss is refused as a tuple grid is. Real kernels through the
interpreter, a real worker process."""

from __future__ import annotations

import pytest
import torch
import triton
from kernels_for_tests import add_kernel
from test_review34_isolation import hidden_grid_of

from autotune import OptionError, Tuning, autotune
from autotune.errors import ExpressionError, NoRecordError

FAST = Tuning(warmup=0, reps=1, compile_workers=0, isolate="off", refine_topk=0)


@pytest.fixture
def hidden_grid(tmp_path, monkeypatch):
    return hidden_grid_of("lo34_hidden_grids", tmp_path, monkeypatch)


def test_a_grid_the_worker_cannot_import_is_named_with_the_grid_s_fixes(hidden_grid):
    """isolate="process" with a grid from a module the worker cannot import: the OptionError names the grid and its
    module and gives the grid's fixes (importable module, a tuple, a $X grid=), not "fix what kept the worker"."""
    kernel = autotune(
        space={"BLOCK": [32, 64]},
        key=["n"],
        tuning=Tuning(isolate="process", trial_timeout_s=120, compile_workers=0, warmup=0, reps=1, refine_topk=0),
    )(add_kernel)
    x, y, out = torch.randn(77), torch.randn(77), torch.empty(77)
    with pytest.raises(OptionError) as raised:
        kernel[hidden_grid](x, y, out, 77)
    text = str(raised.value)
    assert "launch grid 'grid'" in text and "lo34_hidden_grids" in text, text
    assert "make the grid's module importable" in text and "launch it with a tuple" in text, text
    assert "$X grid=" in text and "fix what kept the worker" not in text, text


def test_a_callable_grid_giving_a_negative_size_on_a_miss_is_refused_as_a_tuple_grid_is():
    """A miss whose callable grid gives (-1,) raises the ExpressionError a tuple (-1,) gets, instead of tuning on
    launches that run nothing and leaving the output unwritten; the key is not stored."""
    kernel = autotune(space={"BLOCK": [16, 32]}, key=["n"], tuning=FAST)(add_kernel)
    x, y, out = torch.randn(65), torch.randn(65), torch.zeros(65)
    with pytest.raises(ExpressionError, match="grid sizes must be >= 0"):
        kernel[lambda meta: (-1,)](x, y, out, 65)
    with pytest.raises(ExpressionError, match="grid sizes must be >= 0"):
        kernel[(-1,)](x, y, out, 65)
    with pytest.raises(NoRecordError):
        kernel.record((65,))
    kernel[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, y, out, 65)  # a good grid still tunes
    torch.testing.assert_close(out, x + y)


def test_the_triton_drop_in_hands_triton_the_caller_s_callable_grid():
    """autotune.compat keeps Triton's behaviour: the caller's callable grid goes to Triton as is (a pre_hook sees
    it in nargs["grid"]), so a negative size launches nothing, as with triton.autotune."""
    from autotune import compat

    seen: list = []
    configs = [triton.Config({"BLOCK": b}, pre_hook=lambda nargs: seen.append(nargs["grid"])) for b in (16, 32)]
    kernel = compat.autotune(configs=configs, key=["n"])(add_kernel)
    x, y, out = torch.randn(40), torch.randn(40), torch.zeros(40)

    def grid(meta):
        return (triton.cdiv(meta["n"], meta["BLOCK"]),)

    kernel[grid](x, y, out, 40)
    torch.testing.assert_close(out, x + y)
    assert seen and all(g is grid for g in seen), seen
