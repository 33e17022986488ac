"""The disk cache across real processes: reuse from disk, single flight, a tuner SIGKILLed mid-tune.

The workers use KernelCache directly with a tune() that appends a line to a shared log, so the
number of tunings across processes is counted exactly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune import codec
from autotune.record import TuningRecord
from autotune.storage import disk_entries, load_record

REPO = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent("""
    import json, os, random, sys, time
    from pathlib import Path

    work, tag, key, delay = Path(sys.argv[1]), sys.argv[2], (int(sys.argv[3]),), float(sys.argv[4])
    from autotune.storage import KernelCache, device_fingerprint, runtime_versions, stats
    from autotune.record import Trial, TuningRecord
    from autotune.space import Config

    DT = ("torch.float32", "torch.float32")
    SPACE = [16, 32, 64, 128]
    kc = KernelCache("vadd", "src-hash", "space-sum", lambda cfg: cfg.get("BLOCK") in SPACE)
    (work / f"ready-{tag}").touch()
    while not (work / "go").exists():
        time.sleep(0.005)

    def tune():
        with open(work / "tunings.log", "a") as f:
            f.write(f"{tag} {os.getpid()} {time.time()}\\n")
        (work / f"tuning-{tag}").touch()
        time.sleep(delay)
        winner = random.Random(os.getpid()).choice(SPACE)   # two tunings would likely disagree
        tv, pv = runtime_versions()
        trials = [Trial(config=Config(BLOCK=b), status="ok", median_ms=float(b == winner) or 2.0,
                        min_ms=1.0, samples_ms=[1.0]) for b in SPACE]
        return TuningRecord(kernel="vadd", source_hash="src-hash", device=device_fingerprint(), triton_version=tv,
                            torch_version=pv, space_checksum="space-sum", key=list(key), dtypes=list(DT),
                            winner=Config(BLOCK=winner), trials=trials, tuning_s=delay)

    (work / f"calling-{tag}").write_text(repr(time.time()))
    rec, how = kc.get_or_tune(key, DT, tune)
    print(json.dumps({"tag": tag, "how": how, "winner": rec.winner["BLOCK"], "stats": stats()["vadd"]}))
""")


@pytest.fixture
def work(tmp_path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    (d / "worker.py").write_text(WORKER)
    return d


def spawn(work: Path, tag: str, key: int = 1024, delay: float = 0.5) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("TRITON_INTERPRET", "1")
    return subprocess.Popen(
        [sys.executable, str(work / "worker.py"), str(work), tag, str(key), str(delay)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(work),
    )


def finish(proc: subprocess.Popen, timeout: float = 180) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        if time.time() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.01)


def tunings(work: Path) -> list[str]:
    log = work / "tunings.log"
    return log.read_text().splitlines() if log.exists() else []


def test_second_process_uses_the_winner_from_disk(work):
    (work / "go").touch()
    first = finish(spawn(work, "a", delay=0.0))
    second = finish(spawn(work, "b", delay=0.0))
    assert first["how"] == "tuned" and second["how"] == "disk"
    assert second["winner"] == first["winner"]
    assert second["stats"]["tunings"] == 0 and second["stats"]["disk_hits"] == 1
    assert len(tunings(work)) == 1


def test_four_processes_on_one_key_tune_once(work):
    procs = [spawn(work, f"p{i}", delay=1.0) for i in range(4)]
    for i in range(4):
        wait_for(work / f"ready-p{i}")
    (work / "go").touch()  # released together
    results = [finish(p) for p in procs]
    log = tunings(work)
    assert len(log) == 1, log
    assert sorted(r["how"] for r in results) == ["disk", "disk", "disk", "tuned"]
    assert len({r["winner"] for r in results}) == 1
    entries = disk_entries("vadd")
    assert len(entries) == 1 and entries[0].error is None
    raw = json.loads(entries[0].path.read_text())  # plain valid JSON ...
    assert codec.from_builtins(raw, TuningRecord).winner["BLOCK"] == results[0]["winner"]  # ... and a valid record
    assert sum(r["stats"]["tunings"] for r in results) == 1


def test_sigkilled_tuner_releases_the_key_and_a_waiter_takes_over(work):
    (work / "go").touch()
    victim = spawn(work, "victim", delay=300.0)
    try:
        wait_for(work / "tuning-victim")
        waiter = spawn(work, "waiter", delay=0.0)
        wait_for(work / "calling-waiter")
        time.sleep(0.7)  # the waiter is now blocked on the victim's lock
        assert waiter.poll() is None, "the waiter did not wait for the tuning process"
        killed_at = time.time()
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
    finally:
        if victim.poll() is None:
            victim.kill()
    result = finish(waiter, timeout=120)
    assert result["how"] == "tuned"
    log = tunings(work)
    assert [line.split()[0] for line in log] == ["victim", "waiter"]
    assert float(log[1].split()[2]) >= killed_at
    (entry,) = disk_entries("vadd")
    assert load_record(entry.path).winner["BLOCK"] == result["winner"]
    leftovers = [p.name for p in entry.path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


FORCE_WORKER = textwrap.dedent("""
    import json, logging, sys, time
    from pathlib import Path

    work, role, tests = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    sys.path.insert(0, tests)
    import torch
    from autotune import Tuning, autotune
    from kernels_for_tests import add_kernel

    def wait_for(path):
        deadline = time.time() + 120
        while not path.exists() and time.time() < deadline:
            time.sleep(0.01)

    class SaysWaiting(logging.Handler):  # the forced process, blocked on the entry's lock, logs that it waits
        def emit(self, record):
            if record.getMessage().startswith("waiting for another process"):
                (work / "forced-waiting").touch()

    if role == "forced":
        logging.getLogger("autotune").addHandler(SaysWaiting())
        logging.getLogger("autotune").setLevel(logging.INFO)

    def setup(**_):
        if role == "first" and not (work / "first-tuning").exists():
            (work / "first-tuning").touch()
            wait_for(work / "forced-waiting")  # the forced call began (force= ignores what was stored) and waits

    tuning = Tuning(compile_workers=0, warmup=0, reps=1, force=role == "forced")
    add = autotune(space={"BLOCK": (32, 64)}, key=["n"], grid="(cdiv(n, $BLOCK),)", setup=setup, tuning=tuning)(
        add_kernel
    )
    x, y, out = torch.rand(100), torch.rand(100), torch.empty(100)
    if role == "forced":
        wait_for(work / "first-tuning")
    for _ in range(3):
        add(x, y, out, 100)
    print(json.dumps({"info": add.cache_info(), "winner": add.best_config["BLOCK"]}))
""")


def test_force_takes_a_winner_tuned_while_it_waited_and_then_hits_memory(work):
    """force= with another process tuning the key: the winner produced while it waited for the lock is fresh, so
    the key counts as forced and later calls are memory hits (before, the next call tuned the key again)."""
    (work / "force_worker.py").write_text(FORCE_WORKER)

    def spawn_role(role: str) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("TRITON_INTERPRET", "1")
        args = [sys.executable, str(work / "force_worker.py"), str(work), role, str(REPO / "tests")]
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    first = spawn_role("first")
    forced = finish(spawn_role("forced"))
    first = finish(first)
    info = forced["info"]
    assert (info["tunings"], info["disk_hits"], info["hits"]) == (0, 1, 2), info  # the first's winner, then memory
    assert forced["winner"] == first["winner"]
