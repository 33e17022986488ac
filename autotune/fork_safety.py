"""What a forked child resets: after `os.fork()` only the forking thread exists in the child, so a lock another
thread held stays held forever and threads or worker processes the parent ran are gone. Each module that owns
such state registers its own reset here (`grep reset_in_forked_child` lists them all); DESIGN.md says what each
one does. Imports nothing of autotune, so any layer can use it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["hold_across_fork", "reset_in_forked_child"]


def reset_in_forked_child(reset: Callable[[], None]) -> Callable[[], None]:
    """Run `reset` in every child forked after this (a decorator; returns `reset`). A no-op where there is no fork."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=reset)
    return reset


def hold_across_fork(lock: Any) -> None:
    """Take `lock` before every fork and release it after, in the parent and the child: what it guards is never
    copied into a child half-done. A no-op where there is no fork."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=lock.acquire, after_in_parent=lock.release, after_in_child=lock.release)
