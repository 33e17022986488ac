"""Review fixes of the compiled-model paths: warm-up over GPUs of an objective kernel waits for every call of a
leased key's set, concurrent warm-ups report a key tuned once, a `torch_op` name taken by another function is
refused, and a wrapper launching a plain Triton kernel under torch.compile is named. Real kernels through the
interpreter, a real disk cache, real worker and holder processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pytest
import sweep_kernels as sk
import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel

import autotune
import autotune.compiled.warm_up as warm_up
from autotune import OptionError, Tuning, torch_op
from autotune.storage.disk import DiskCache

TESTS = str(Path(__file__).resolve().parent)
HOLD = (
    "import sys, time; from pathlib import Path; from autotune.storage.files import acquire_entry_lock; "
    "lock = acquire_entry_lock(Path(sys.argv[1]), 'k'); print('held', flush=True); "
    "[time.sleep(0.05) for _ in iter(lambda: Path(sys.argv[2]).exists(), True)]"
)


def test_warmup_over_gpus_of_an_objective_kernel_waits_for_every_call_of_the_leased_key(monkeypatch, tmp_path):
    """Under an objective a sweep's job is a set of calls (one per key): calls n=1, 1, 2 make sets [0, 1] and [2].
    Key 2's lease is held by a live process, so its set (job 1) is warmed up in this process afterwards, with the
    calls of that set: call 2 (n=2), not `calls[1]` (n=1, key 1's)."""
    monkeypatch.setattr(warm_up, "visible_gpus", lambda: 1)  # one interpreter worker stands in for a GPU's
    kernel = sk.sweep_shapes_by_n
    autotune.clear_autotune_cache(kernel=kernel)
    entry = kernel.cache.entry(*kernel.key_of(kernel.bind(*sk.shape_call(2))))
    release = tmp_path / "release"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(DiskCache().path(entry)), str(release)], env=env, stdout=PIPE
    )
    waited_for = []
    original = warm_up._wait_for_leased

    def release_then_wait(kernel, makers, tuning):
        waited_for.extend(m.args for m in makers)
        release.touch()  # the holder ends without filing a winner: this process tunes the key
        holder.wait(timeout=60)
        return original(kernel, makers, tuning)

    monkeypatch.setattr(warm_up, "_wait_for_leased", release_then_wait)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        report = autotune.warmup(kernel, sk.shape_calls([1, 1, 2]))
    finally:
        holder.kill()
        holder.wait()
    assert waited_for == [(2,)]
    assert sorted(w.key for w in report.tuned) == [(1,), (2,)] and report.cached == ()
    assert sorted(key for key, _ in kernel.cache.records()) == [(1,), (2,)]


def test_a_sweep_under_an_objective_names_each_sets_calls():
    """`KeyOutcome.calls`: the positions in `calls` of the makers each set (job) was tuned on."""
    kernel = sk.sweep_shapes_by_n
    autotune.clear_autotune_cache(kernel=kernel)
    report = autotune.sweep(kernel, sk.shape_calls([1, 2, 1]), workers=1)
    by_key = {tuple(k.key): k for k in report.keys}
    assert by_key[(1,)].calls == [0, 2] and by_key[(2,)].calls == [1]
    assert [k.job for k in report.keys] == [0, 1]


def _first(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _second(x: torch.Tensor) -> torch.Tensor:
    return x * 10


def test_an_op_name_another_function_registered_is_refused_and_the_first_op_keeps_its_code():
    """torch would swap the op's code under the first op object's callers; the same function again re-registers."""
    first = torch_op("autotune_review::taken", _first, mutates_args=())
    with pytest.raises(OptionError, match=r"already registered for .*_first.*_second would replace it"):
        torch_op("autotune_review::taken", _second, mutates_args=())
    assert first(torch.ones(2)).tolist() == [2.0, 2.0]
    again = torch_op("autotune_review::taken", _first, mutates_args=())  # a reload, a notebook cell run again
    assert again(torch.ones(2)).tolist() == [2.0, 2.0]


def _scaled_by(scale: float):
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * scale

    return scaled


def test_two_closures_of_one_factory_are_two_functions_to_an_op_name():
    first = torch_op("autotune_review::scaled", _scaled_by(2.0), mutates_args=())
    with pytest.raises(OptionError, match=r"already registered for .*scaled#"):
        torch_op("autotune_review::scaled", _scaled_by(3.0), mutates_args=())
    assert first(torch.ones(2)).tolist() == [2.0, 2.0]
    torch_op("autotune_review::scaled", _scaled_by(2.0), mutates_args=())  # the same values: the same function
    # a closure over an object made anew at each run (a tensor, a helper) counts by its type, so a module reloaded
    # or a factory run again with such values re-registers its op
    torch_op("autotune_review::scaled_by_tensor", _scaled_by(torch.ones(2)), mutates_args=())
    again = torch_op("autotune_review::scaled_by_tensor", _scaled_by(torch.ones(2)), mutates_args=())
    assert again(torch.ones(2)).tolist() == [1.0, 1.0]


def test_a_wrapper_whose_closure_cell_is_not_filled_yet_registers():
    def make():
        def doubled(x: torch.Tensor) -> torch.Tensor:
            return x * 2 if helper is not None else x

        op = torch_op("autotune_review::doubled", doubled, mutates_args=())  # `helper` is assigned after this line
        helper = object()
        return op, helper

    op, _ = make()
    assert op(torch.ones(2)).tolist() == [2.0, 2.0]


@triton.jit
def _negate(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, -tl.load(x + offs, mask=offs < n), mask=offs < n)


_add = autotune.autotune(
    space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(warmup=0, reps=1, isolate="off")
)(add_kernel)


def test_a_wrapper_launching_a_plain_triton_kernel_names_the_op_and_fake_when_its_shapes_are_traced():
    @torch_op("autotune_review::add_negate", mutates_args=())
    def add_negate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _add(x, y, out, x.numel())
        _negate[(triton.cdiv(x.numel(), 64),)](out, out, x.numel(), BLOCK=64)
        return out

    x, y = torch.ones(100), torch.ones(100)
    assert add_negate(x, y).tolist() == [-2.0] * 100  # eager: the real wrapper
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: add_negate(a, b) * 2, fullgraph=True, backend="aot_eager", dynamic=True)
    with pytest.raises(Exception, match=r"'autotune_review::add_negate'.*plain @triton.jit.*fake="):
        compiled(x, y)
