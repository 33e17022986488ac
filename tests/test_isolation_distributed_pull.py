"""Three fixes: an isolated tuning's measurements hold this process's measuring lock (so they never overlap another
tuning's, and a worker killed mid-measure lets go of it); distributed mode's leader reads the forced-tuning
baseline before prune= runs; `autotune cache pull` tells a lease held by another process ("busy") from a tier that
cannot lock ("unlockable") by what the tier says, not by the time it waited. Real kernels (interpreted), real
worker processes, real file locks."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from kernels_for_tests import add_and_check, add_kernel, calling_thread

from autotune import autotune
from autotune.engine.isolation.pool import shutdown
from autotune.engine.measuring import measuring

# The hooks below run in the worker process too (a worker imports this module by name, as it imports the
# kernel's recipe); they find their files through this variable, which a worker started after it was set inherits.
_FILES = "TEST_ISOLATION_FILES_DIR"
SPACE = {"BLOCK": [16, 32, 64]}
TUNING = {"warmup": 1, "reps": 2, "refine_topk": 2, "refine_reps": 2, "compile_workers": 0}
INSIDE_S = 0.02  # a sleep inside each measured interval: what makes two unserialised measurements overlap


def _files() -> Path:
    return Path(os.environ[_FILES])


def _timed(call):
    """Run `call` inside a measured interval, appended as "who start end" (the monotonic clock: one per machine)."""
    start = time.monotonic()
    try:
        return call()
    finally:
        time.sleep(INSIDE_S)
        line = f"{os.getpid()}-{threading.current_thread().name} {start!r} {time.monotonic()!r}\n"
        fd = os.open(_files() / "intervals", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def record_setup(**named) -> None:
    _timed(lambda: None)


def record_do_bench(fn) -> float:
    start = time.perf_counter()
    _timed(fn)
    return (time.perf_counter() - start) * 1e3


def hang_once(**named) -> None:
    """The first trial hangs (until the trial timeout kills its worker), after saying the worker's pid."""
    if not list(_files().glob("entered-*")):
        (_files() / f"entered-{os.getpid()}").write_text(str(os.getpid()))
        time.sleep(600)


def _recorded_tuning(isolate: str, **extra):
    return autotune(
        space=SPACE,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        setup=record_setup,
        do_bench=record_do_bench,
        tuning=dict(TUNING, isolate=isolate, **extra),
    )(add_kernel)


def _overlapping(lines: list[str]) -> list[tuple]:
    seen = [(who, float(a), float(b)) for who, a, b in (line.split() for line in lines)]
    return [(x, y) for i, x in enumerate(seen) for y in seen[i + 1 :] if x[0] != y[0] and x[1] < y[2] and y[1] < x[2]]


def _fresh_worker(monkeypatch, tmp_path: Path) -> None:
    """Stop any worker an earlier test left: the next one starts with this test's files directory."""
    monkeypatch.setenv(_FILES, str(tmp_path))
    shutdown()


def test_an_isolated_and_an_in_process_tuning_never_measure_at_the_same_time(monkeypatch, tmp_path) -> None:
    _fresh_worker(monkeypatch, tmp_path)
    isolated, in_process = _recorded_tuning("process"), _recorded_tuning("off")
    add_and_check(isolated, 8)  # the worker started and loaded the kernel: both tunings below measure at once
    (tmp_path / "intervals").unlink()
    errors: list[BaseException] = []
    threads = [calling_thread(isolated, 64, errors, "isolated"), calling_thread(in_process, 96, errors, "in-process")]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    finally:
        shutdown()
    assert not any(t.is_alive() for t in threads) and errors == []
    lines = (tmp_path / "intervals").read_text().splitlines()
    whose = {line.split()[0] for line in lines}
    assert len(whose) == 2 and f"{os.getpid()}-in-process" in whose  # the worker's and this process's thread
    assert _overlapping(lines) == []


def test_a_worker_killed_mid_measure_lets_go_of_the_measuring_lock(monkeypatch, tmp_path) -> None:
    """The worker hangs inside a measurement: the lock is held until the trial timeout kills it, and free after."""
    _fresh_worker(monkeypatch, tmp_path)
    kernel = autotune(
        space={"BLOCK": [32, 64]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        setup=hang_once,
        tuning=dict(TUNING, isolate="process", trial_timeout_s=10.0, refine_topk=0),
    )(add_kernel)
    errors: list[BaseException] = []
    tuner = calling_thread(kernel, 48, errors, "tuner")
    got: dict = {}

    def take_the_lock() -> None:
        with measuring():
            got["worker alive"] = os.path.exists(f"/proc/{got['pid']}") and _running(got["pid"])

    try:
        tuner.start()
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("entered-*")):
            assert time.monotonic() < deadline and tuner.is_alive(), "the worker's trial never started"
            time.sleep(0.05)
        got["pid"] = int(next(tmp_path.glob("entered-*")).read_text())
        taker = threading.Thread(target=take_the_lock)
        taker.start()
        taker.join(120)
        tuner.join(120)
    finally:
        shutdown()
    assert not taker.is_alive(), "the measuring lock was never let go after the worker was killed"
    assert got["worker alive"] is False  # taken only once the hanging worker was killed
    assert not tuner.is_alive() and errors == []
    statuses = {t.config["BLOCK"]: t.status.value for t in kernel.record(key=(48,)).trials}
    assert "timeout" in statuses.values() and "ok" in statuses.values()


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- distributed mode: forced concurrent first calls agree on a key once -----------------------------------------

_RANK: dict = {}  # in a spawned rank: its two calling threads and its files directory, for the hook below


def _in_frame(thread: threading.Thread | None, name: str) -> bool:
    """Whether `thread` is inside distributed.py's function `name` now (`_one_round`: waiting for the round)."""
    import sys

    frame = sys._current_frames().get(getattr(thread, "ident", None) or -1)
    while frame is not None:
        if frame.f_code.co_name == name and frame.f_code.co_filename.endswith(os.path.join("modes", "distributed.py")):
            return True
        frame = frame.f_back
    return False


def _wait_until(ready, what: str) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"never happened: {what}")
        time.sleep(0.02)


def hold_the_first_tuning(**named) -> None:
    """Rank 0's first trial waits until each rank's second forced call waits for the round the first one holds."""
    if not _RANK.get("held"):
        _RANK["held"] = True
        _wait_until(lambda: _in_frame(_RANK.get("second"), "_one_round"), "the second call waits for the round")
        _wait_until((_RANK["dir"] / "rank1-second-waits").exists, "rank 1's second call waits for its round")


def _forced_twice_on_a_rank(rank: int, world: int, out: str) -> None:
    """One rank: two threads make forced first calls of one key at once (the second while the first agrees)."""
    from datetime import timedelta

    import torch.distributed as dist

    from autotune import Tuning, stats

    directory = Path(out)
    os.environ["AUTOTUNE_CACHE_DIR"] = str(directory / f"cache-{rank}")
    dist.init_process_group(
        "gloo",
        init_method=f"file://{directory / 'pg-init'}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=90),
    )
    tuning = Tuning(force=True, distributed="rank0", isolate="off", compile_workers=0, warmup=0, reps=1, refine_topk=0)
    kernel = autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", setup=hold_the_first_tuning, tuning=tuning)(
        add_kernel
    )
    errors: list[BaseException] = []
    _RANK.update(dir=directory, held=rank != 0)
    first = calling_thread(kernel, 40, errors, "first")
    first.start()
    _wait_until(lambda: _in_frame(first, "run"), "the first call agrees")  # inside its round
    _RANK["second"] = second = calling_thread(kernel, 40, errors, "second")
    second.start()
    if rank == 1:
        _wait_until(lambda: _in_frame(second, "_one_round"), "the second call waits for the round")
        (directory / "rank1-second-waits").touch()
    first.join(120)
    second.join(120)
    tunings = stats().get(kernel.name, {}).get("tunings", 0)
    (directory / f"rank{rank}.txt").write_text(f"{[repr(e) for e in errors]!r} {tunings}")
    dist.destroy_process_group()


def test_forced_concurrent_first_calls_under_a_process_group_agree_on_a_key_once(tmp_path) -> None:
    """The second forced call reads memory before it waits for the first one's round: the winner that round
    agreed on is fresh for it (taken), as without a group, not tuned a second time."""
    import torch.multiprocessing as mp

    mp.spawn(_forced_twice_on_a_rank, args=(2, str(tmp_path)), nprocs=2, join=True)
    results = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert results[0] == "[] 1", results  # rank 0 tuned the key once, for both calls; nothing raised
    assert results[1].startswith("[] "), results


# -- `autotune cache pull`: a lock held by another process is "busy", a tier that cannot lock "unlockable" -------

# A positive timeout shorter than any lock attempt takes: the failed attempts below all outlast it, so only what
# the tier reports can tell a held lock from one that cannot be taken.
TINY_LOCK_TIMEOUT = "1e-9"


def _pull(url: str, directory: Path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]))
    args = ["cache", "pull", "--lock-timeout", TINY_LOCK_TIMEOUT, "--cache-dir", str(directory), "--remote-url", url]
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=env, timeout=120
    )


def _pushed_record(redis_server):
    """A record of key (1,) in the Redis of `redis_server` (written there as a push would)."""
    from test_cache import make_record

    from autotune.storage import EntryRef
    from autotune.storage.redis_tier import RedisCache

    record = make_record((1,))
    assert RedisCache(redis_server.url).put(EntryRef.of(record), record)
    return record


def test_pull_says_a_lock_another_process_holds_is_busy(redis_server, tmp_path) -> None:
    from autotune.storage import DiskCache, EntryRef, disk_entries

    record = _pushed_record(redis_server)
    held = DiskCache(tmp_path / "node").lock(EntryRef.of(record), timeout_s=1)  # this process tunes the entry
    try:
        res = _pull(redis_server.url, tmp_path / "node")
    finally:
        assert held is not None
        held.release()
    line = next((x for x in res.stderr.splitlines() if "could not be copied" in x), res.stderr)
    assert res.returncode == 1 and "1 entry could not be copied" in line, res.stdout + res.stderr
    assert "stayed held by another process" in line and "could not be taken" not in line, line
    assert disk_entries(directory=tmp_path / "node") == []


def test_pull_says_a_lock_that_cannot_be_taken_is_unlockable_however_long_the_attempt_took(
    redis_server, tmp_path
) -> None:
    _pushed_record(redis_server)
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "add").write_text("")  # the kernel's directory is a file: no entry lock can be made there
    res = _pull(redis_server.url, tmp_path / "node")
    line = next((x for x in res.stderr.splitlines() if "could not be copied" in x), res.stderr)
    assert res.returncode == 1 and "1 entry could not be copied" in line, res.stdout + res.stderr
    assert "cannot lock" in line and "could not be taken" in line and "stayed held" not in line, line
