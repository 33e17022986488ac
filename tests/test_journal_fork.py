"""The crash journal's locks and `fork`: a note is judged by its writer's lock only from another pid namespace, so a
child forked by the writer must not keep that lock, and a note kept after a device error stays locked while its
writer lives."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from test_storage_review33 import _env, _in_other_pid_namespace, _started, needs_unshare

JUDGE = """
import json
from autotune.storage import journal
crashed = journal.crashed("m:k", (1024,), ("torch.float32",))
print(json.dumps([dict(c) for c in crashed]))
"""


def _in_namespace_then_wait(code: str) -> subprocess.Popen:
    """Run `code` in a fresh pid namespace whose first process (a shell) outlives it: it prints "ended" when the
    code's process ends and keeps the namespace (and whatever that process forked) alive until stdin closes."""
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", '"$1" -c "$2"; echo ended; read line',
         "sh", sys.executable, textwrap.dedent(code)],
        env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ended", proc.stderr.read()
    return proc


@needs_unshare
def test_a_child_forked_while_measuring_does_not_keep_its_crashed_parent_alive():
    """A process measuring a config forks (a data-loader worker, a subprocess helper) and then dies: its child,
    still running, must not hold the note's lock, or the config is never recorded as crashed from another pid
    namespace (a container restarted with the same host name) while the child lives."""
    measurer = _in_namespace_then_wait(
        """
        import os, time
        from autotune.storage import journal
        with journal.measuring("m:k", (1024,), ("torch.float32",), {"BLOCK": 32}):
            if os.fork() == 0:
                time.sleep(300)
                os._exit(0)
            os._exit(9)
        """
    )
    try:
        seen = _in_other_pid_namespace(JUDGE)
    finally:
        measurer.communicate(input="\n", timeout=120)
    assert json.loads(seen) == [{"BLOCK": 32}]


@needs_unshare
def test_a_child_forked_after_a_device_error_does_not_keep_the_note_locked():
    """The note kept after a device error is locked by its writer for the rest of its life; a child it forks later
    does not inherit that lock."""
    measurer = _in_namespace_then_wait(
        """
        import os, time
        from autotune.errors import DeviceError
        from autotune.storage import journal
        try:
            with journal.measuring("m:k", (1024,), ("torch.float32",), {"BLOCK": 16}):
                raise DeviceError("an illegal memory access was encountered")
        except DeviceError:
            pass
        if os.fork() == 0:
            time.sleep(300)
            os._exit(0)
        os._exit(0)
        """
    )
    try:
        seen = _in_other_pid_namespace(JUDGE)
    finally:
        measurer.communicate(input="\n", timeout=120)
    assert json.loads(seen) == [{"BLOCK": 16}]


@needs_unshare
def test_a_note_that_cannot_be_rewritten_after_a_device_error_stays_locked_while_its_writer_lives():
    """When the note naming the device error cannot be written, the earlier note stays, still locked: another pid
    namespace does not read a live process's measurement as a crash."""
    writer = _started(
        """
        import os, sys
        from autotune.errors import DeviceError
        from autotune.storage import journal

        def refused(*args, **kwargs):
            raise OSError(28, "No space left on device")

        os.replace = refused
        try:
            with journal.measuring("m:k", (1024,), ("torch.float32",), {"BLOCK": 8}):
                raise DeviceError("an illegal memory access was encountered")
        except DeviceError:
            pass
        print("ready", flush=True)
        sys.stdin.read()
        """
    )
    try:
        seen = _in_other_pid_namespace(JUDGE)
    finally:
        writer.communicate(input="", timeout=120)
    assert json.loads(seen) == []
