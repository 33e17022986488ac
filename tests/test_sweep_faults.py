"""autotune.sweep and warmup's sweep path where something goes wrong: a key no config of which runs while it is split
over workers, a driver-side fault in one job, AUTOTUNE_FORCE, a mistyped executor, a bad `--sign` key, a worker that
dies while starting, an entry of a weaker search, an unwritable cache directory under warm-up, makers that cannot
reach a worker. Real kernels through the interpreter, real worker processes (tests/sweep_kernels.py)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sweep_kernels as sk
import triton
import triton.language as tl

import autotune
import autotune.compiled.warm_up as warm_up
import autotune.sweeps.api as sweep_api
from autotune.storage.files import disk_entries

TESTS = str(Path(__file__).parent)
REPO = str(Path(__file__).parent.parent)


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([TESTS, REPO, os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **extra}


def _stored(kernel: str) -> list:
    return [e.record for e in disk_entries(kernel) if e.record]


def test_a_split_key_whose_every_config_fails_is_reported_failed_with_each_workers_errors():
    # N=16: every BLOCK of sweep_pick fails its static assert; one key over two workers is split
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([16]), workers=2)
    (outcome,) = report.keys
    assert outcome.status == "failed" and report.failed == [outcome]
    assert "no config of sweep_pick ran successfully on any of the 2 sweep workers" in str(outcome.error)
    assert "(sweep worker 1)" in str(outcome.error) and "rank" not in str(outcome.error)


def test_a_fault_in_the_driver_fails_its_key_and_the_other_workers_finish(monkeypatch):
    real = sweep_api._lease_holder

    def failing_for_64(cache, key, dtypes):
        if key == (64,):
            raise RuntimeError("the lease tier broke")
        return real(cache, key, dtypes)

    monkeypatch.setattr(sweep_api, "_lease_holder", failing_for_64)
    # (a worker thread that died with its job counted running made the others wait for it forever: pytest-timeout)
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64, 128]), workers=2)
    assert [k.status for k in report.keys] == ["tuned", "failed", "tuned"]
    assert report.keys[1].error == "RuntimeError: the lease tier broke"


def test_autotune_force_retunes_keys_a_sweep_would_skip(monkeypatch):
    first = autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=1)
    assert [k.status for k in first.keys] == ["tuned"]
    monkeypatch.setenv("AUTOTUNE_FORCE", "1")
    again = autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=1)
    assert [k.status for k in again.keys] == ["tuned"]


def test_a_mistyped_executor_is_refused_before_any_worker_starts():
    with pytest.raises(autotune.OptionError) as caught:
        autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), executor="locl")
    message = str(caught.value)
    assert "executor='locl'" in message and "did you mean 'local'" in message
    assert "'ray://head:10001'" in message and "'auto'" in message


def test_the_cli_reads_the_sign_key_before_sweeping(tmp_path):
    command = [
        sys.executable, "-m", "autotune", "sweep", "sweep_kernels:sweep_pick", "--calls",
        "sweep_kernels:cli_pick_calls", "--workers", "1", "--export", str(tmp_path / "sweep.tar.gz"),
        "--sign", str(tmp_path / "no-such-key"),
    ]  # fmt: skip
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr
    assert "cannot read the key file" in done.stderr and "no-such-key" in done.stderr
    assert _stored("sweep_pick") == [] and "interpreter" not in done.stdout  # nothing was swept


DYING_KERNEL = """
import os, signal
import triton, triton.language as tl
from autotune import autotune

if os.environ.get("DIE_ON_IMPORT") == "1":  # the sweep worker importing the kernel: killed, as by the OOM killer
    os.kill(os.getpid(), signal.SIGKILL)


@autotune(space={"BLOCK": [32]}, key=["n"], grid="(cdiv(n, $BLOCK),)")
@triton.jit
def dying_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs) + tl.load(y + offs))
"""

UNGUARDED = """
import autotune, sweep_kernels as sk
autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=1)
"""


def test_only_a_worker_that_exits_with_status_1_while_starting_is_told_about_the_main_guard(tmp_path, monkeypatch):
    (tmp_path / "dying_kernels.py").write_text(DYING_KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    import dying_kernels

    with pytest.raises(autotune.AutotuneError, match="killed by SIGKILL") as caught:
        autotune.sweep(dying_kernels.dying_add, sk.calls([64]), workers=1, worker_env=[{"DIE_ON_IMPORT": "1"}])
    assert "__main__" not in str(caught.value)

    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script)], env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "exit status 1" in done.stderr and "if __name__ == '__main__':" in done.stderr


def test_an_entry_of_a_weaker_search_is_tuned_again_and_a_sweeps_tuning_is_recorded():
    weaker = sk.TUNING.replace(strategy="random", max_configs=1)
    first = autotune.sweep(sk.sweep_add, sk.calls([100]), workers=1, tuning=weaker)
    assert [k.status for k in first.keys] == ["tuned"]
    (record,) = _stored("sweep_add")
    assert record.search is not None and (record.search.strategy, record.search.max_configs) == ("random", 1)

    again = autotune.sweep(sk.sweep_add, sk.calls([100]), workers=1)  # the kernel's own Tuning: exhaustive
    assert [k.status for k in again.keys] == ["tuned"]
    (record,) = _stored("sweep_add")
    assert record.search is not None and record.search.strategy == "exhaustive" and record.search.measured == 3
    assert [k.status for k in autotune.sweep(sk.sweep_add, sk.calls([100]), workers=1).keys] == ["cached"]


def test_warmup_over_gpus_keeps_the_winners_in_the_kernel_when_the_cache_cannot_be_written(tmp_path, monkeypatch):
    autotune.clear_autotune_cache(kernel=sk.sweep_pick)  # what other tests left in this process's memory
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(blocker / "cache"))  # under a regular file: unwritable, as root too
    monkeypatch.setattr(warm_up, "visible_gpus", lambda: 1)  # one interpreter worker stands in for a GPU's
    with pytest.warns(autotune.CacheWarning, match="kept in memory only"):
        report = autotune.warmup(sk.sweep_pick, sk.pick_calls([32, 64]))
    assert [w.key for w in report.tuned] == [(32,), (64,)]
    tunings = sk.sweep_pick.cache_info()["tunings"]
    for n in (32, 64):
        x, out = sk.pick_call(n)[0]
        sk.sweep_pick(x, out, N=n)
        assert sk.sweep_pick.best_config == {"BLOCK": n}
    assert sk.sweep_pick.cache_info()["tunings"] == tunings  # both were hits of the warm-up's winners


def test_warmup_of_an_online_kernel_over_gpus_tunes_on_the_blocking_path(monkeypatch):
    autotune.clear_autotune_cache(kernel=sk.sweep_pick)
    monkeypatch.setenv("AUTOTUNE_MODE", "online")
    monkeypatch.setattr(warm_up, "visible_gpus", lambda: 1)
    report = autotune.warmup(sk.sweep_pick, sk.pick_calls([32]))
    assert [w.key for w in report.tuned] == [(32,)]


def test_warmup_over_gpus_names_its_own_fixes_for_what_a_worker_cannot_take(monkeypatch):
    monkeypatch.setattr(warm_up, "visible_gpus", lambda: 1)
    with pytest.raises(autotune.CallError) as caught:
        autotune.warmup(sk.sweep_pick, [lambda: sk.pick_call(32)])
    message = str(caught.value)
    assert "functools.partial" in message and "in_process=True" in message and "sweep(" not in message

    @autotune.autotune(space={"BLOCK": [32]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=sk.TUNING)
    @triton.jit
    def local_add(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs) + tl.load(y + offs))

    with pytest.raises(autotune.OptionError) as caught:
        autotune.warmup(local_add, sk.calls([64]))
    message = str(caught.value)
    assert message.startswith("autotune.warmup(local_add, ...)") and "in_process=True" in message
    assert "sweep(" not in message
    assert [w.key for w in autotune.warmup(local_add, sk.calls([64]), in_process=True).tuned] == [(64,)]


def test_warmups_maker_error_shows_a_picklable_maker():
    with pytest.raises(autotune.CallError) as caught:
        autotune.warmup(sk.sweep_pick, [int], in_process=True)  # returns 0, not (args, kwargs)
    assert "functools.partial(make_args, n)" in str(caught.value) and "lambda:" not in str(caught.value)


def test_calls_that_are_not_a_list_of_makers_are_refused_before_any_worker_starts(monkeypatch):
    def no_workers(*args, **kwargs):
        raise AssertionError("a worker pool was made")

    monkeypatch.setattr(sweep_api, "_executor", no_workers)
    with pytest.raises(
        autotune.CallError, match=r"sweep\(sweep_add, \.\.\.\): call 0 is tuple .*not an argument maker"
    ):
        autotune.sweep(sk.sweep_add, [sk.add_call(32)])
    with pytest.raises(autotune.CallError, match=r"calls must be a list of argument makers, got partial"):
        autotune.sweep(sk.sweep_add, sk.calls([32])[0])
    with pytest.raises(autotune.CallError, match=r"autotune.warmup\(sweep_add, calls\): calls must be a list"):
        autotune.warmup(sk.sweep_add, 5, in_process=True)
    with pytest.raises(autotune.OptionError, match=r"in_process='yes': give True, False or None"):
        autotune.warmup(sk.sweep_add, sk.calls([32]), in_process="yes")


def test_a_kernel_whose_name_holds_the_plain_jit_function_is_refused_before_any_worker_starts(monkeypatch):
    monkeypatch.setattr(sweep_api, "_executor", lambda *a, **k: pytest.fail("a worker pool was made"))
    with pytest.raises(autotune.OptionError, match=r"sweep_kernels\.renamed_add.*plain @triton\.jit function"):
        autotune.sweep(sk.renamed, sk.calls([32]))


def test_a_maker_that_raises_in_warmup_is_named():
    with pytest.raises(autotune.CallError, match=r"the argument maker .*failing_add_call.* failed: ValueError: no "):
        autotune.warmup(sk.sweep_add, [functools.partial(sk.failing_add_call, 32)], in_process=True)


@pytest.mark.parametrize(
    ("calls", "said"),
    [
        ("sweep_kernels:TUNING", "calls must be a list of argument makers, got Tuning"),
        ("sweep_kernels:failing_maker", "calling it raised ValueError: no such shape"),
        ("sweep_kernels:no_such_makers", "has no attribute 'no_such_makers' (was it renamed"),
    ],
)
def test_the_cli_refuses_calls_that_are_not_makers_in_one_line(calls, said):
    command = [sys.executable, "-m", "autotune", "sweep", "sweep_kernels:sweep_pick", "--calls", calls]
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def _kill_the_worker_at_its_first_tune(monkeypatch) -> list[int]:
    """The first `tune` request a local worker gets finds it killed (SIGKILL, as the OOM killer would): the driver
    sees a worker lost in the middle of a key's tuning."""
    import autotune.sweeps.local as local

    real, killed = local.LocalWorker.tune, []

    def tune(self):
        if not killed:
            killed.append(self.process.pid)
            self.process.kill()
            self.process.join()
        return real(self)

    monkeypatch.setattr(local.LocalWorker, "tune", tune)
    return killed


def test_a_forced_key_whose_worker_dies_while_tuning_is_tuned_again_on_the_retry(monkeypatch):
    """The retry of a job is not "another call of the key": with AUTOTUNE_FORCE=1 it tunes the key again, and does
    not report the entry from before the sweep as cached."""
    autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=1)
    (before,) = _stored("sweep_pick")
    monkeypatch.setenv("AUTOTUNE_FORCE", "1")
    killed = _kill_the_worker_at_its_first_tune(monkeypatch)
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=1)
    assert killed and [(k.status, k.attempts) for k in report.keys] == [("tuned", 2)], report.keys
    (after,) = _stored("sweep_pick")
    assert after.timestamp > before.timestamp and report.workers[0].restarts == 1


def test_a_worker_that_cannot_be_restarted_fails_its_keys_saying_why(monkeypatch):
    """A worker dies, and starting its replacement raises (here an OSError, as fork does out of memory): its keys
    are `failed` naming both, the worker's stats say why it was given up, and no driver thread dies."""
    import autotune.sweeps.local as local

    _kill_the_worker_at_its_first_tune(monkeypatch)

    def restart(self):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(local.LocalWorker, "restart", restart)
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64]), workers=1)
    assert [k.status for k in report.keys] == ["failed", "failed"]
    for outcome in report.keys:
        assert "died: killed by SIGKILL" in str(outcome.error), outcome.error
        assert "a new worker could not start: OSError: [Errno 12] Cannot allocate memory" in str(outcome.error)
    assert report.workers[0].lost == "a new worker could not start: OSError: [Errno 12] Cannot allocate memory"
    assert "worker 0 on interpreter: given up: a new worker could not start" in str(report)


def test_a_split_key_whose_worker_dies_and_cannot_be_restarted_is_reported_failed(monkeypatch):
    """The same where the key is split over two workers: the key is in the report, `failed`, saying why."""
    import autotune.sweeps.local as local

    real, killed = local.LocalWorker.tune_share, []

    def tune_share(self, share):
        if not killed:
            killed.append(self.index)
            self.process.kill()
            self.process.join()
        return real(self, share)

    def restart(self):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(local.LocalWorker, "tune_share", tune_share)
    monkeypatch.setattr(local.LocalWorker, "restart", restart)
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([64]), workers=2)
    assert [k.status for k in report.keys] == ["failed"], report.keys
    assert "a new worker could not start: OSError" in str(report.keys[0].error)


def test_a_ray_slot_stopped_under_its_thread_is_a_lost_worker_not_a_driver_bug():
    """Ctrl-C stops every slot from the main thread while a slot's thread goes on to its next request: a stopped
    actor is `WorkerLost` (the key is `interrupted`), not an AttributeError logged as the driver's fault."""
    ray = pytest.importorskip("ray")
    from autotune.sweeps.ray_executor import RayWorker
    from autotune.sweeps.slots import WorkerLost

    slot = RayWorker(ray, 3, None, {}, gpu=False)  # never launched: as after `stop`
    for request in (lambda: slot.prepare(sk.pick_calls([32])[0]), slot.tune, lambda: slot.tune_share(None)):
        with pytest.raises(WorkerLost, match="sweep actor 3 is stopped"):
            request()
