"""Ctrl-C during an isolated tuning whose compile worker hangs: the KeyboardInterrupt reaches the caller at once
(the pipeline would otherwise wait for the pool thread stuck in that worker's request, forever without a
compile timeout), and the compile workers it was using are killed, not left behind; the pool replaces them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

CHILD = textwrap.dedent("""
    import faulthandler, os, signal, sys
    # Ctrl-C is KeyboardInterrupt here however pytest was started: a process started in the background by a
    # shell (`pytest ... &`, nohup) ignores SIGINT, and Python then keeps it ignored in the child it starts.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    faulthandler.register(signal.SIGUSR1, all_threads=True)     # the test's view of a hang: every thread's stack
    sys.path.insert(0, {tests!r})
    import torch
    from isolation_kernels import hanging_compile_add, slow_compile_add
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    try:
        hanging_compile_add(x, y, out, 100)
    except KeyboardInterrupt:
        try:       # its process group, killed by the tuning on its way out (not by this process's exit)
            os.killpg(int(open(os.environ["AUTOTUNE_TEST_HANG_MARK"]).read()), 0)
            print("the hanging compile worker is still running", flush=True)
        except ProcessLookupError:
            print("the hanging compile worker is gone", flush=True)
        slow_compile_add(x, y, out, 100)        # the pool replaced the killed worker: compile workers still work
        print("then", sorted((t.config["BLOCK"], t.status.value) for t in slow_compile_add.record().trials))
        raise
""")


def _children(pid: int) -> set[int]:
    """The pids of the processes whose parent is `pid` (its workers)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_while_a_compile_worker_hangs_ends_the_tuning_and_kills_its_workers(tmp_path):
    mark = tmp_path / "hanging-compile"
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        TRITON_INTERPRET="1",
        AUTOTUNE_TEST_HANG_MARK=str(mark),
        AUTOTUNE_CACHE_DIR=str(tmp_path / "cache"),
        AUTOTUNE_PROGRESS="0",
    )
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(tests=str(TESTS))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 240  # the workers' start imports torch and Triton
        while not mark.exists():
            assert child.poll() is None, child.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the hanging compile never started"
            time.sleep(0.1)
        workers = _children(child.pid) | {int(mark.read_text())}  # the measuring and the compile workers
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=90)  # seconds with the fix; never without it
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)  # where it hangs, for the failure's message
            time.sleep(2)
            child.kill()
            out, err = child.communicate()
            raise AssertionError(f"the tuning did not end within 90 s of Ctrl-C:\n{out}\n{err[-6000:]}") from None
        assert "KeyboardInterrupt" in err, err[-3000:]
        assert child.returncode != 0
        assert "the hanging compile worker is gone" in out
        assert "then [(32, 'ok'), (64, 'timeout'), (128, 'ok')]" in out
        deadline = time.monotonic() + 30  # reaped by init once the child is gone
        while any(_group_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if _group_alive(pid)]
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
        for pid in workers:  # each leads a process group of its own
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
