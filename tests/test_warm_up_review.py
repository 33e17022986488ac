"""Review fixes of `autotune.warmup` and the capture warning: an entry of a weaker search is tuned again, a compat
kernel whose early_config_prune changes a config in place is warmed up as its own run would be, a capture warning
of an objective kernel names the only ways it is tuned, and warm-up over GPUs waits for a key another process is
tuning. Real kernels through the interpreter, a real disk cache, real worker and holder processes."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import warnings
from pathlib import Path
from subprocess import PIPE

import pytest
import sweep_kernels as sk
import torch
import triton
from kernels_for_tests import add_kernel

import autotune
import autotune.compiled.warm_up as warm_up
from autotune import CaptureWarning, OptionError, Tuning, warmup
from autotune.compat import autotune as triton_style_autotune
from autotune.compiled.capture import assume_capturing
from autotune.storage.disk import DiskCache

FAST = Tuning(warmup=0, reps=1, compile_workers=0, isolate="off")
SIX = {"BLOCK": [16, 32, 64, 128, 256, 512]}
TESTS = str(Path(__file__).resolve().parent)


def add_args(n: int, grid: bool = False) -> tuple[tuple, dict]:
    kwargs = {"grid": functools.partial(_grid, n)} if grid else {}
    return (torch.randn(n), torch.randn(n), torch.empty(n), n), kwargs


def _grid(n: int, meta: dict) -> tuple[int]:
    return (triton.cdiv(n, meta["BLOCK"]),)


def six_block_add(tuning: Tuning):
    return autotune.autotune(space=SIX, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=tuning)(add_kernel)


def test_warmup_tunes_again_an_entry_of_a_weaker_search_as_a_first_call_would():
    weak = six_block_add(FAST.replace(strategy="random", max_configs=2, seed=0))
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    weak(x, y, out, 100)  # files an entry that measured 2 of the 6 configs
    assert len(weak.record((100,)).trials) == 2
    thorough = six_block_add(FAST.replace(strategy="exhaustive"))  # a new process, searching harder
    report = warmup(thorough, [functools.partial(add_args, 100)])
    assert [w.key for w in report.tuned] == [(100,)] and report.cached == ()
    assert len(thorough.record((100,)).trials) == 6
    tunings = thorough.cache_info()["tunings"]
    thorough(x, y, out, 100)  # the warmed key is served: no second tuning
    assert thorough.cache_info()["tunings"] == tunings and torch.equal(out, x + y)


def test_warmup_given_a_tuning_that_searches_harder_tunes_a_weaker_entry_again():
    weak_tuning = FAST.replace(strategy="random", max_configs=2, seed=0)
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    six_block_add(weak_tuning)(x, y, out, 100)  # files an entry that measured 2 of the 6 configs
    add = six_block_add(weak_tuning)  # a new process whose kernel searches as weakly
    report = warmup(add, [functools.partial(add_args, 100)], tuning=FAST.replace(strategy="exhaustive"))
    assert [w.key for w in report.tuned] == [(100,)] and report.cached == ()
    assert len(add.record((100,)).trials) == 6  # the kernel keeps the winner of the harder search
    again = warmup(
        six_block_add(weak_tuning), [functools.partial(add_args, 100)], tuning=FAST.replace(strategy="exhaustive")
    )
    assert [w.key for w in again.cached] == [(100,)] and again.tuned == ()


def clamp_stages(configs, nargs, **kwargs):
    """Triton's matmul_perf_model pattern: clamps a config in place and returns it."""
    for config in configs:
        if config.num_stages > 2:
            config.num_stages = 2
    return configs


def flip_stages(configs, nargs, **kwargs):
    """Changes a config in place on every run: the configs never settle."""
    for config in configs:
        config.num_stages = 5 - config.num_stages
    return configs


def compat_add(prune, tuning: Tuning = FAST):
    configs = [triton.Config({"BLOCK": b}, num_stages=3) for b in (32, 64)]
    return triton_style_autotune(
        configs=configs, key=["n"], prune_configs_by={"early_config_prune": prune}, tuning=tuning
    )(add_kernel)


@pytest.mark.parametrize("objective", [None, "geomean"])
def test_a_compat_kernel_whose_prune_changes_a_config_in_place_is_warmed_up(objective):
    add = compat_add(clamp_stages, FAST.replace(objective=objective))
    report = warmup(add, [functools.partial(add_args, 100, True)])
    assert [w.key for w in report.tuned] == [(100,)] and report.cached == ()
    assert [c.num_stages for c in add.configs] == [2, 2]  # indexed anew, as compat's own run does
    tunings = add.cache_info()["tunings"]
    (x, y, out, n), launch = add_args(100, True)
    add[launch["grid"]](x, y, out, n)  # served from what the warm-up tuned
    assert add.cache_info()["tunings"] == tunings and torch.equal(out, x + y)
    again = warmup(
        compat_add(clamp_stages, FAST.replace(objective=objective)), [functools.partial(add_args, 100, True)]
    )
    assert [w.key for w in again.cached] == [(100,)] and again.tuned == ()


def test_a_compat_prune_that_never_settles_is_named():
    with pytest.raises(OptionError, match="early_config_prune changed the configs in place on each of 8 runs"):
        warmup(compat_add(flip_stages), [functools.partial(add_args, 100, True)])


def test_the_capture_warning_of_an_objective_kernel_names_warmup_and_sweep():
    add = autotune.autotune(
        space={"BLOCK": [32, 64]}, key=None, grid="(cdiv(n, $BLOCK),)", tuning=FAST.replace(objective="geomean")
    )(add_kernel)
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    with warnings.catch_warnings(record=True) as caught, assume_capturing():
        warnings.simplefilter("always")
        add(x, y, out, 100)
    [warned] = [str(w.message) for w in caught if issubclass(w.category, CaptureWarning)]
    assert "not tuned on launches" in warned and "tuned at its next call" not in warned
    assert "autotune.warmup(add_kernel, calls)" in warned and "autotune.sweep(add_kernel, calls)" in warned
    with pytest.raises(autotune.AutotuneError, match="sweep"):  # what the warning says: a launch does not tune it
        add(x, y, out, 100)


HOLD = (
    "import sys, time; from pathlib import Path; from autotune.storage.files import acquire_entry_lock; "
    "lock = acquire_entry_lock(Path(sys.argv[1]), 'k'); print('held', flush=True); "
    "[time.sleep(0.05) for _ in iter(lambda: Path(sys.argv[2]).exists(), True)]"
)


def test_warmup_over_gpus_waits_for_a_key_another_process_is_tuning(monkeypatch, tmp_path):
    """The sweep finds key 64's lease held by a live process (`leased`): the warm-up does not call it cached (no tier
    holds it) but warms it up in this process, which waits for the lease (released here once the sweep is done,
    without an entry: this process tunes the key) and keeps the winner in the kernel's memory."""
    monkeypatch.setattr(warm_up, "visible_gpus", lambda: 1)  # one interpreter worker stands in for a GPU's
    autotune.clear_autotune_cache(kernel=sk.sweep_pick)
    entry = sk.sweep_pick.cache.entry(*sk.sweep_pick.key_of(sk.sweep_pick.bind(*sk.pick_call(64))))
    release = tmp_path / "release"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(DiskCache().path(entry)), str(release)], env=env, stdout=PIPE
    )
    waited_for = []
    original = getattr(warm_up, "_wait_for_leased", None)

    def release_then_wait(kernel, makers, tuning):
        waited_for.extend(m.args for m in makers)
        release.touch()  # the holder ends without filing a winner
        holder.wait(timeout=60)
        return original(kernel, makers, tuning)

    monkeypatch.setattr(warm_up, "_wait_for_leased", release_then_wait, raising=False)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        report = autotune.warmup(sk.sweep_pick, sk.pick_calls([32, 64]))
    finally:
        holder.kill()
        holder.wait()
    assert waited_for == [(64,)]
    assert sorted(w.key for w in report.tuned) == [(32,), (64,)] and report.cached == ()
    assert sorted(key for key, _ in sk.sweep_pick.cache.records()) == [(32,), (64,)]
