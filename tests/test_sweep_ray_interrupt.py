"""Ctrl-C during a Ray sweep kills a busy actor too (it would go on tuning on its GPU and hold its resources after
`sweep()` raised). A real local Ray runtime; the interrupt is the main thread's KeyboardInterrupt."""

from __future__ import annotations

import _thread
import functools
import os
import threading
import time

import pytest
import sweep_kernels as sk

import autotune


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def test_ctrl_c_kills_a_ray_actor_that_is_busy_building_a_call(ray_cluster, tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    pid_file = gate / "pid-64"

    def interrupt_once_the_actor_waits() -> None:
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_once_the_actor_waits, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        autotune.sweep(sk.sweep_pick, [functools.partial(sk.gated_pick, 64, str(gate))], executor="ray", workers=1)
    actor = int(pid_file.read_text())
    deadline = time.monotonic() + 60  # the maker waits 120 s at its gate: only a kill ends it sooner
    while _alive(actor) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(actor)
