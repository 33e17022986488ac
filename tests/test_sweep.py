"""autotune.sweep with real worker processes (and a real local Ray cluster): winners as tuning alone gives,
skip-if-cached, resumption after the driver is killed, crashes and killed workers, two device kinds, Redis
visibility during the sweep, the CLI's JSON and archive. Kernels and makers: tests/sweep_kernels.py."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from subprocess import PIPE

import pytest
import sweep_kernels as sk
import torch

import autotune
import autotune.compiled.warm_up as warm_up
from autotune.aot.archive import import_archive
from autotune.record import TrialStatus
from autotune.storage.disk import DiskCache
from autotune.storage.files import disk_entries
from autotune.sweeps.scratch import remove_abandoned_worker_dirs

TESTS = str(Path(__file__).parent)
REPO = str(Path(__file__).parent.parent)


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([TESTS, REPO, os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **extra}


def _stored(kernel: str) -> dict[tuple, dict]:
    """{(key..., device): winner} of the disk cache."""
    return {(*e.record.key, e.record.device): dict(e.record.winner) for e in disk_entries(kernel) if e.record}


def _wait_for(path: Path, what: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def test_two_workers_give_the_winners_of_tuning_alone_and_skip_a_key_another_process_tuned(tmp_path):
    # key N=64 tuned first by a separate process, the ordinary way (a call of the kernel)
    script = "import sweep_kernels as sk; x, o = sk.pick_call(64)[0]; sk.sweep_pick(x, o, N=64)"
    subprocess.run([sys.executable, "-c", script], env=_env(), check=True, timeout=300)
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64, 128]), workers=2)

    assert [k.status for k in report.keys] == ["tuned", "cached", "tuned"]
    assert {k.worker for k in report.keys if k.status == "tuned"} <= {0, 1}
    assert report.by_device() == {"interpreter": {"tuned": 2, "skipped": 1, "failed": 0}}
    # each winner is what tuning that key alone picks (the one config whose static assert holds)
    for n in (32, 128):
        x, out = sk.pick_call(n)[0]
        sk.sweep_pick(x, out, N=n)  # a hit of the entry the sweep wrote: no tuning here
        assert sk.sweep_pick.best_config == {"BLOCK": n}
    assert _stored("sweep_pick") == {(n, "interpreter"): {"BLOCK": n} for n in (32, 64, 128)}
    record = sk.sweep_pick.record()
    assert [t.status for t in record.trials].count(TrialStatus.OK) == 1
    assert sum(w.configs_measured for w in report.workers) == 6

    # a live process holds the lease of key 256 (as a process tuning it does): skipped, not waited for
    bound = sk.sweep_pick.bind(*sk.pick_call(256))
    entry = sk.sweep_pick.cache.entry(*sk.sweep_pick.key_of(bound))
    hold = (
        "import sys, time; from pathlib import Path; from autotune.storage.files import acquire_entry_lock; "
        "lock = acquire_entry_lock(Path(sys.argv[1]), 'k'); print('held', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(DiskCache().path(entry))], env=_env(), stdout=PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        again = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64, 256, 256]), workers=1)  # two calls of 256
    finally:
        holder.kill()
        holder.wait()
    assert [k.status for k in again.keys] == ["cached", "cached", "leased", "leased"] and not again.tuned
    assert f"pid {holder.pid}" in str(again.keys[2].error) and f"pid {holder.pid}" in str(again.keys[3].error)
    assert "interpreter" in str(again) and json.loads(again.to_json())["by_device"]["interpreter"]["skipped"] == 4


def test_worker_directories_are_removed_once_their_workers_end_and_a_live_ones_is_kept(tmp_path, monkeypatch):
    """A worker's private cache is a directory in the temporary directory; killed at the sweep's end, the worker
    cannot remove it, so the driver removes those whose lock is free once its workers stop, as a starting worker
    does (a Ray node's). The directory of a worker still running elsewhere is kept."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    claim = (
        "from autotune.sweeps.scratch import claim_worker_dir; import time; "
        "print(claim_worker_dir(), flush=True); time.sleep(600)"
    )
    live = subprocess.Popen([sys.executable, "-c", claim], env=_env(), stdout=PIPE)
    try:
        assert live.stdout is not None
        live_dir = Path(live.stdout.readline().decode().strip())
        older = temp / "autotune-sweep-worker-older"  # an earlier version's, with no lock file in it
        older.mkdir()
        os.utime(older, (0, 0))
        report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64]), workers=2)
        assert [k.status for k in report.keys] == ["tuned", "tuned"]
        assert sorted(temp.glob("autotune-sweep-worker-*")) == [live_dir]
    finally:
        live.kill()
        live.wait()
    assert remove_abandoned_worker_dirs() == 1 and not live_dir.exists()


def test_two_device_kinds_each_tune_every_key_filed_under_their_own_fingerprint():
    kinds = [{"AUTOTUNE_DEVICE_KIND": "kind-a"}, {"AUTOTUNE_DEVICE_KIND": "kind-b"}]
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64]), workers=2, worker_env=kinds)
    assert report.by_device() == {k: {"tuned": 2, "skipped": 0, "failed": 0} for k in ("kind-a", "kind-b")}
    assert {(k.device, k.worker) for k in report.keys} == {("kind-a", 0), ("kind-b", 1)}
    assert _stored("sweep_pick") == {(n, k): {"BLOCK": n} for n in (32, 64) for k in ("kind-a", "kind-b")}

    only_b = autotune.sweep(
        sk.sweep_pick, sk.pick_calls([32, 128]), workers=2, worker_env=kinds, device_kinds=["kind-b"]
    )
    assert [(k.key, k.device, k.status) for k in only_b.keys] == [
        ([32], "kind-b", "cached"),
        ([128], "kind-b", "tuned"),
    ]
    assert (128, "kind-a") not in _stored("sweep_pick")
    with pytest.raises(autotune.OptionError, match="no worker has 'kind-c'"):
        autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=1, worker_env=kinds[:1], device_kinds=["kind-c"])


def test_a_segfaulting_config_and_a_worker_killed_from_outside_cost_only_themselves(tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()

    def kill_the_waiting_worker() -> None:
        _wait_for(gate / "pid-100", "the worker waiting in the maker")
        os.kill(int((gate / "pid-100").read_text()), signal.SIGKILL)
        (gate / "released").touch()

    killer = threading.Thread(target=kill_the_waiting_worker)
    killer.start()
    makers = [functools.partial(sk.gated_call, 100, str(gate)), functools.partial(sk.add_call, 200)]
    report = autotune.sweep(sk.sweep_crashy, makers, workers=2)
    killer.join()

    assert [k.status for k in report.keys] == ["tuned", "tuned"]
    retried = report.keys[0]
    assert retried.attempts == 2  # its first worker was killed: once more, on the other
    assert sum(w.restarts for w in report.workers) == 1  # and the killed worker was replaced
    for n in (100, 200):
        record = next(e.record for e in disk_entries("sweep_crashy") if e.record and e.record.key == [n])
        statuses = {dict(t.config)["MODE"]: t.status for t in record.trials}
        assert statuses == {0: TrialStatus.OK, 1: TrialStatus.CRASHED}
        assert record.winner["MODE"] == 0


DRIVER = """
import functools, sys
import autotune, sweep_kernels as sk
if __name__ == "__main__":
    makers = sk.pick_calls([32, 64]) + [functools.partial(sk.gated_pick, 128, sys.argv[1])]
    autotune.sweep(sk.sweep_pick, makers, workers=1)
"""


def test_a_sweep_resumes_after_its_driver_is_killed_and_winners_reach_redis_while_it_runs(
    tmp_path, redis_server, monkeypatch
):
    gate = tmp_path / "gate"
    gate.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = _env(AUTOTUNE_REMOTE_CACHE=redis_server.url)
    driver = subprocess.Popen([sys.executable, str(script), str(gate)], env=env)
    try:
        _wait_for(gate / "pid-128", "the third key's maker")
        # the first two winners are in Redis while the sweep is still running
        assert len(redis_server.client().keys("autotune:entry:*")) == 2
        driver.kill()
        driver.wait(60)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert _stored("sweep_pick") == {(n, "interpreter"): {"BLOCK": n} for n in (32, 64)}
    (gate / "released").touch()

    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", redis_server.url)
    makers = sk.pick_calls([32, 64]) + [functools.partial(sk.gated_pick, 128, str(gate))]
    report = autotune.sweep(sk.sweep_pick, makers, workers=1)
    assert [k.status for k in report.keys] == ["cached", "cached", "tuned"]
    assert len(redis_server.client().keys("autotune:entry:*")) == 3


def test_the_cli_writes_the_summary_json_and_a_signed_archive(tmp_path):
    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    out, archive = tmp_path / "sweep.json", tmp_path / "sweep.tar.gz"
    command = [
        sys.executable, "-m", "autotune", "sweep", "sweep_kernels:sweep_pick", "--calls",
        "sweep_kernels:cli_pick_calls", "--workers", "1", "--json", str(out), "--export", str(archive),
        "--sign", str(key),
    ]  # fmt: skip
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "interpreter" in done.stdout and "wrote" in done.stdout
    summary = json.loads(out.read_text())
    assert summary["by_device"] == {"interpreter": {"tuned": 2, "skipped": 0, "failed": 0}}
    assert [k["winner"] for k in summary["keys"]] == [{"BLOCK": 32}, {"BLOCK": 64}]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert sum(1 for n in names if n.endswith(".json") and "sweep_pick" in n) == 2
    installed = import_archive(archive, cache_dir=tmp_path / "elsewhere", verify_key=key)
    assert installed.complete and len(installed.records_imported) == 2


def test_ray_actors_give_the_winners_of_tuning_alone(ray_cluster, tmp_path):
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64, 128]), executor="ray", workers=2)
    assert report.executor == "ray" and [k.status for k in report.keys] == ["tuned"] * 3
    assert len(report.workers) == 2 and sum(w.configs_measured for w in report.workers) == 9
    assert _stored("sweep_pick") == {(n, "interpreter"): {"BLOCK": n} for n in (32, 64, 128)}
    assert ray_cluster.is_initialized()  # the caller's runtime is left running


def test_a_ray_actor_killed_from_outside_is_replaced_and_its_key_retried(ray_cluster, tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()

    def kill_the_waiting_actor() -> None:
        _wait_for(gate / "pid-64", "the actor waiting in the maker")
        os.kill(int((gate / "pid-64").read_text()), signal.SIGKILL)
        (gate / "released").touch()

    killer = threading.Thread(target=kill_the_waiting_actor)
    killer.start()
    makers = [functools.partial(sk.gated_pick, 64, str(gate))]
    report = autotune.sweep(sk.sweep_pick, makers, executor="ray", workers=1)
    killer.join()
    assert [(k.status, k.attempts, k.winner) for k in report.keys] == [("tuned", 2, {"BLOCK": 64})]
    assert report.workers[0].restarts == 1


def test_one_key_over_two_workers_is_split_and_refined_on_one():
    report = autotune.sweep(sk.sweep_pair, sk.calls([300]), workers=2)
    (outcome,) = report.keys
    assert outcome.status == "tuned" and outcome.split_over == [0, 1] and outcome.refined_on == 0
    assert [w.configs_measured for w in report.workers] == [1, 1]  # BLOCK 32 on worker 0, 64 on worker 1
    (entry,) = [e.record for e in disk_entries("sweep_pair") if e.record]
    assert [t.status for t in entry.trials] == [TrialStatus.OK] * 2
    # both were then measured again side by side on worker 0 (TUNING: reps=2 in a share, then one refine round
    # each), and the winner is the faster of them by those rounds
    assert [len(t.samples_ms) for t in entry.trials] == [1, 1]
    assert entry.winner == min(entry.trials, key=lambda t: t.median_ms).config


INTERRUPTED = """
import functools, signal, sys
import autotune, sweep_kernels as sk
if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell starting pytest in the background ignores it
    try:
        autotune.sweep(sk.sweep_pick, [sk.pick_calls([32])[0], functools.partial(sk.gated_pick, 64, sys.argv[1])])
    except KeyboardInterrupt:
        sys.exit(3)
"""


def test_ctrl_c_stops_every_worker_and_keeps_what_finished(tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(INTERRUPTED)
    driver = subprocess.Popen([sys.executable, str(script), str(gate)], env=_env(), stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(gate / "pid-64", "the second key's maker")
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=120)
        assert driver.returncode == 3, err  # the sweep raised KeyboardInterrupt in the driver
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert "Traceback" not in err and "failed in the driver" not in err  # the stopped worker's call is no bug
    worker = int((gate / "pid-64").read_text())
    deadline = time.monotonic() + 30
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:  # killed, then reaped by the driver
        time.sleep(0.05)
    assert not Path(f"/proc/{worker}").exists()
    assert _stored("sweep_pick") == {(32, "interpreter"): {"BLOCK": 32}}


def test_a_key_whose_redis_lease_a_live_node_holds_is_skipped_and_a_broken_one_is_not(redis_server, monkeypatch):
    """Another node tuning a key holds its Redis lease (with an expiry, renewed while it tunes): the sweep reports
    the key `leased`, naming the holder, instead of waiting for it. A lease with no expiry is no live node's."""
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", redis_server.url)
    bound = sk.sweep_pick.bind(*sk.pick_call(64))
    entry = sk.sweep_pick.cache.entry(*sk.sweep_pick.key_of(bound))
    lease_key = f"autotune:lease:{entry.location}:{entry.entry_id}"
    holder = json.dumps({"token": "t", "pid": 4242, "host": "node-7", "since": 0.0})
    redis_server.client().set(lease_key, holder, px=120_000)
    held = autotune.sweep(sk.sweep_pick, sk.pick_calls([64]), workers=1)
    assert [k.status for k in held.keys] == ["leased"]
    assert "pid 4242 on host node-7 (its remote lease)" in str(held.keys[0].error)

    redis_server.client().set(lease_key, holder)  # no expiry: broken, taken over by the tuning
    with pytest.warns(autotune.CacheWarning, match="no live node can be holding it"):
        broken = autotune.sweep(sk.sweep_pick, sk.pick_calls([64]), workers=1)
    assert [k.status for k in broken.keys] == ["tuned"]


def test_a_kernel_that_leaves_isolate_unset_is_isolated_in_a_sweep_worker():
    """The library measures in-process by default, but a sweep worker isolates a kernel whose Tuning and
    environment leave `isolate` unset: its segfaulting config is recorded `crashed`, not the worker's death and a
    failed key."""
    import isolation_kernels as ik

    report = autotune.sweep(ik.segfaulting_add, sk.calls([96]), workers=1)
    assert [k.status for k in report.keys] == ["tuned"], report.keys
    args, _ = sk.add_call(96)
    ik.segfaulting_add(*args)  # a hit of the entry the sweep wrote (its winner is a MODE 0 config)
    record = ik.segfaulting_add.record((96,))
    statuses = {t.config["MODE"]: t.status for t in record.trials if t.config["BLOCK"] == 32}
    assert statuses == {1: TrialStatus.CRASHED}
    assert record.where == "worker process"


def test_progress_true_draws_a_bar_of_keys_done_per_device_kind(capsys):
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64]), workers=1, progress=True)
    assert [k.status for k in report.keys] == ["tuned", "tuned"]
    err = capsys.readouterr().err
    assert "autotune sweep" in err and "2/2" in err  # tqdm's bar: both keys done
    assert "interpreter" in err  # the device kinds' counts on the bar


def test_warmup_where_gpus_are_visible_is_a_local_sweep_unless_asked_in_process(monkeypatch):
    """`autotune.warmup` is `sweep` with the local executor over every visible GPU (a worker per GPU), and tunes in
    this process with `in_process=True` or without a GPU. The GPU count is the seam (`visible_gpus`): here one
    interpreter worker stands in for the GPU's."""
    import autotune.compiled.warm_up as warm_up

    monkeypatch.setattr(warm_up, "visible_gpus", lambda: 1)
    autotune.clear_autotune_cache(kernel=sk.sweep_pick)  # what other tests left in this process's memory
    swept = autotune.warmup(sk.sweep_pick, sk.pick_calls([32, 64]))
    assert [w.key for w in swept.tuned] == [(32,), (64,)] and not swept.cached
    assert _stored("sweep_pick") == {(n, "interpreter"): {"BLOCK": n} for n in (32, 64)}  # filed by the driver
    monkeypatch.setattr(warm_up, "_warm_up_over_gpus", None)  # in_process=True must not go near a sweep
    again = autotune.warmup(sk.sweep_pick, sk.pick_calls([32, 64, 128]), in_process=True)
    assert [w.key for w in again.cached] == [(32,), (64,)] and [w.key for w in again.tuned] == [(128,)]


def test_a_kernel_without_grid_a_heuristics_layer_or_a_memory_only_cache_sweeps_and_warms_up(monkeypatch):
    """The maker's grid= reaches the worker's launch; a worker adds what triton.heuristics adds; a compat kernel
    with cache_results=False gets its winners in memory (warmup), none on disk."""
    report = autotune.sweep(sk.sweep_gridless, [functools.partial(sk.grid_call, 100)], workers=1)
    assert [(k.status, k.error) for k in report.keys] == [("tuned", None)]
    report = autotune.sweep(sk.sweep_heuristic, sk.calls([100]), workers=1)
    assert [(k.status, k.error) for k in report.keys] == [("tuned", None)]
    assert sorted(e.record.kernel for e in disk_entries()) == ["sweep_gridless", "sweep_heuristic"]
    monkeypatch.setattr(warm_up, "visible_gpus", lambda: 1)  # warmup goes to a local sweep
    warmed = autotune.warmup(sk.sweep_memory_only, [functools.partial(sk.grid_call, 100)])
    assert [k.key for k in warmed.tuned] == [(100,)]
    assert sorted(e.record.kernel for e in disk_entries()) == ["sweep_gridless", "sweep_heuristic"]  # none added
    before = sk.sweep_memory_only.tuner.cache_info()
    (x, y, out, n), launch = sk.grid_call(100)
    sk.sweep_memory_only[launch["grid"]](x, y, out, n)  # served from memory: no tuning
    after = sk.sweep_memory_only.tuner.cache_info()
    assert (after["tunings"], after["hits"]) == (before["tunings"], before["hits"] + 1)
    torch.testing.assert_close(out, x + y)


def test_calls_of_one_key_tune_it_once_and_a_warmup_counts_it_once(monkeypatch):
    report = autotune.sweep(sk.sweep_add, sk.calls([100, 100, 100, 100]), workers=2)
    assert sorted(k.status for k in report.keys) == ["cached", "cached", "cached", "tuned"]
    assert {k.error for k in report.keys if k.status == "cached"} == {"the key of another call of this sweep"}
    forced = autotune.sweep(sk.sweep_add, sk.calls([100, 100, 100]), workers=1, tuning=sk.TUNING.replace(force=True))
    assert sorted(k.status for k in forced.keys) == ["cached", "cached", "tuned"]  # force tunes the key once
    monkeypatch.setattr(warm_up, "visible_gpus", lambda: 1)
    warmed = autotune.warmup(sk.sweep_pair, sk.calls([64, 64, 64]))
    assert [k.key for k in warmed.tuned] == [(64,)] and warmed.cached == ()
