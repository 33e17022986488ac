"""autotune.sweep where a review found it wrong: a remote cache set in code by the kernel's module, AUTOTUNE_MODE=online,
a config that crashes a worker under isolate="off" (the crash journal a replacement worker must find), Ray addresses
that do not answer or differ from the connected cluster, Ray actors' directories, bad worker_env / device_kinds,
the CLI's words without Ray, the split figures with more workers than configs. Real kernels through the
interpreter, real worker processes, a real redis-server and a real local Ray runtime."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import sweep_kernels as sk
import triton
import triton.language as tl

import autotune
from autotune import autotune as autotune_decorator
from autotune.errors import OptionError
from autotune.record import TrialStatus
from autotune.storage.files import disk_entries

TESTS = str(Path(__file__).parent)
REPO = str(Path(__file__).parent.parent)

# The kernel's module configures Redis at its top level, as a configuration block would; a sweep worker imports this
# module again (the kernel's), and runs this again there.
if os.environ.get("REVIEW_SWEEP_REDIS_URL"):
    autotune.set_remote_cache(os.environ["REVIEW_SWEEP_REDIS_URL"])


@autotune_decorator(space={"BLOCK": [32, 64], "MODE": [0, 1]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=sk.TUNING)
@triton.jit
def crashy_off(x, y, out, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    """isolate="off" (the kernel's own Tuning): BLOCK=64, MODE=1 reads far out of bounds and ends its process."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if MODE == 1 and BLOCK == 64:
        value = tl.load(x + offs + (1 << 40))
    else:
        value = tl.load(x + offs, mask=mask)
    tl.store(out + offs, value + tl.load(y + offs, mask=mask), mask=mask)


@autotune_decorator(space={"BLOCK": [32, 64]}, key=["N"], grid="(1,)", tuning=sk.TUNING)
@triton.jit
def review_pick(x, out, N: tl.constexpr, BLOCK: tl.constexpr):
    """sweep_pick of this module (a worker imports it, running its top level): only BLOCK == N compiles."""
    tl.static_assert(BLOCK == N)
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs) * 2)


def remote_tier_seen(path: str, n: int) -> tuple[tuple, dict]:
    """A maker that writes whether the worker it runs in has a remote tier, then makes review_pick's arguments."""
    from autotune.storage.remote_config import remote_tiers

    Path(path).write_text(str(bool(remote_tiers())))
    return sk.pick_call(n)


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([TESTS, REPO, os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **extra}


def test_a_remote_cache_the_kernels_module_sets_in_code_is_off_in_the_workers(redis_server, monkeypatch, tmp_path):
    """The worker tunes without Redis (the driver holds the key's Redis lease meanwhile) and the winner reaches
    Redis through the driver."""
    monkeypatch.setenv("REVIEW_SWEEP_REDIS_URL", redis_server.url)
    monkeypatch.setenv("AUTOTUNE_LOCK_TIMEOUT_S", "5")  # before the fix each key waited this long for the lease
    autotune.set_remote_cache(redis_server.url)
    seen = tmp_path / "seen"
    report = autotune.sweep(review_pick, [functools.partial(remote_tier_seen, str(seen), 32)], workers=1)
    assert seen.read_text() == "False"
    assert [k.status for k in report.keys] == ["tuned"], report.keys
    assert len(redis_server.client().keys("autotune:entry:*")) == 1  # the driver filed the winner in Redis


@pytest.mark.parametrize("how", ["AUTOTUNE_MODE=online", "Tuning(mode='online')"])
def test_an_online_mode_tunes_on_the_blocking_path_in_a_sweep(monkeypatch, how):
    tuning = None
    if how == "AUTOTUNE_MODE=online":
        monkeypatch.setenv("AUTOTUNE_MODE", "online")
    else:
        tuning = sk.TUNING.replace(mode="online")
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=1, tuning=tuning)
    assert [(k.status, k.winner) for k in report.keys] == [("tuned", {"BLOCK": 32})], report.keys


def test_a_config_that_kills_its_worker_is_found_crashed_by_the_replacement_worker():
    """isolate="off": the config ends the worker; its replacement reads the dead worker's crash journal, records
    the config `crashed` and tunes the others."""
    report = autotune.sweep(crashy_off, sk.calls([64]), workers=1)
    (outcome,) = report.keys
    assert (outcome.status, outcome.attempts) == ("tuned", 2), outcome
    assert outcome.winner != {"BLOCK": 64, "MODE": 1} and report.workers[0].restarts == 1
    (record,) = [e.record for e in disk_entries("crashy_off") if e.record]
    crashed = [dict(t.config) for t in record.trials if t.status is TrialStatus.CRASHED]
    assert crashed == [{"BLOCK": 64, "MODE": 1}], record.trials


def test_no_worker_is_started_after_the_last_jobs_final_failure(monkeypatch):
    """A worker killed under every try of the only job: the job fails after its retry, and no third worker starts
    for nothing."""
    import autotune.sweeps.local as local

    real, killed = local.LocalWorker.tune, []

    def tune(self):
        killed.append(self.process.pid)
        self.process.kill()
        self.process.join()
        return real(self)

    monkeypatch.setattr(local.LocalWorker, "tune", tune)
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=1)
    assert [(k.status, k.attempts) for k in report.keys] == [("failed", 2)], report.keys
    assert len(killed) == 2 and report.workers[0].restarts == 1
    lost = str(report.workers[0].lost)  # given up, saying why, in its stats and the summary
    assert "killed by SIGKILL" in lost and "no job was left for a new worker" in lost
    assert "worker 0 on interpreter: given up:" in str(report)


@pytest.mark.parametrize(
    "keyword, value, said",
    [
        ("worker_env", {"AUTOTUNE_DEVICE_KIND": "a"}, "give a list of dicts"),
        ("worker_env", [{"OMP_NUM_THREADS": 1}], "'OMP_NUM_THREADS': 1: a worker's environment variables are strings"),
        ("worker_env", ["AUTOTUNE_DEVICE_KIND=a"], "'AUTOTUNE_DEVICE_KIND=a': not a dict"),
        ("device_kinds", [], "give at least one device fingerprint"),
        ("device_kinds", "interpreter", "give a list of device fingerprints, e.g. ['interpreter']"),
    ],
)
def test_bad_worker_env_or_device_kinds_are_refused_before_any_worker_starts(monkeypatch, keyword, value, said):
    import autotune.sweeps.local as local

    def no_start(self):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(local.LocalExecutor, "start", no_start)
    with pytest.raises(OptionError, match=f"sweep\\({keyword}=") as raised:
        autotune.sweep(sk.sweep_shapes, sk.shape_calls([1, 2]), workers=1, **{keyword: value})
    assert said in str(raised.value)


def test_a_split_key_lists_only_the_workers_that_measured_configs():
    """Two configs, three workers: the third worker's share is empty and it is not said to have measured."""
    report = autotune.sweep(sk.sweep_pair, sk.calls([100]), workers=3)
    (outcome,) = report.keys
    assert outcome.status == "tuned" and outcome.split_over == [0, 1], outcome
    assert [w.configs_measured for w in report.workers] == [1, 1, 0]


def test_the_cli_without_ray_names_the_option_typed_and_the_packages_install(monkeypatch, capsys, tmp_path):
    from autotune.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.syspath_prepend(TESTS)
    for given in (["--ray"], ["--ray", "head.example:6379"]):
        rc = main(["sweep", "sweep_kernels:sweep_pick", "--calls", "sweep_kernels:cli_pick_calls", *given])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith(f"autotune sweep: {' '.join(given)} needs Ray, which is not installed"), err
        assert 'pip install "autotune[ray]"' in err and "-e" not in err and "executor=" not in err, err


def _cli(*options: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "autotune", "sweep", "sweep_kernels:sweep_pick", "--calls",
        "sweep_kernels:cli_pick_calls", *options,
    ]  # fmt: skip
    env = _env()
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)


def test_the_cli_says_in_one_line_when_no_ray_cluster_answers():
    """`--ray 127.0.0.1:1` (nothing listens there) is said at once, not waited for; `--ray auto` without a
    cluster is one line naming the address, exit 2, no traceback."""
    pytest.importorskip("ray")
    refused = _cli("--ray", "127.0.0.1:1")
    assert refused.returncode == 2, refused.stderr
    assert "--ray 127.0.0.1:1: the Ray cluster at '127.0.0.1:1' cannot be reached" in refused.stderr
    if Path(tempfile.gettempdir(), "ray", "ray_current_cluster").exists():
        pytest.skip("a Ray cluster of this machine may be running: --ray auto would find it")
    auto = _cli("--ray", "auto")
    assert auto.returncode == 2 and "Traceback" not in auto.stderr, auto.stderr
    assert "--ray auto: could not connect to the Ray cluster at 'auto'" in auto.stderr


def _worker_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("autotune-sweep-worker-*"))


def test_a_ray_sweep_removes_its_actors_directories_and_refuses_another_clusters_address(ray_cluster):
    before = _worker_dirs()
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64]), executor="ray", workers=2)
    assert [k.status for k in report.keys] == ["tuned", "tuned"], report.keys
    assert _worker_dirs() - before == set()
    with pytest.raises(OptionError, match="already connected to the Ray cluster at .*give executor='ray'"):
        autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), executor="ray://gpu-head.example:10001", workers=1)
    address = ray_cluster.get_runtime_context().gcs_address
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([128]), executor=address, workers=1)
    assert [k.status for k in report.keys] == ["tuned"] and ray_cluster.is_initialized()
