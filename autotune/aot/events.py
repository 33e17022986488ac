"""Listens to Triton's compile events to tell whether `triton.compile` found a kernel in its cache.

Why: a precompile report counts cache hits (`CompiledConfig.cached`); Triton says so only through its
compilation listener, which is called on the thread that compiles.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["CompileListener", "LISTENER"]


class CompileListener:
    """Triton's compilation listener (`knobs.compilation.listener`), chained to any listener already set.

    It tells whether `triton.compile` found the kernel in its cache: events land in the calling thread's
    collector (`capture()`, for the explicit-target path, where our thread calls compile) and in every open
    `session()` by hash (for the JIT path, where Triton's AsyncCompileMode calls compile on our pool).
    """

    def __init__(self) -> None:
        self.previous: Callable[..., Any] | None = None
        self.local = threading.local()
        self.sessions: list[dict[str, bool]] = []
        self.lock = threading.Lock()

    def __call__(
        self, *, src: Any, metadata: Any, metadata_group: Any, times: Any, cache_hit: bool, **extra: Any
    ) -> None:
        if getattr(self.local, "calling", False):  # a listener installed over ours chains back to it: once is enough
            return
        self.local.calling = True
        try:
            self._note(metadata, cache_hit)
            if self.previous is not None:
                self.previous(
                    src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit, **extra
                )
        finally:
            self.local.calling = False

    def _note(self, metadata: Any, cache_hit: bool) -> None:
        digest = metadata.get("hash") if isinstance(metadata, Mapping) else None
        events = getattr(self.local, "events", None)
        if events is not None:
            events.append((digest, bool(cache_hit)))
        if digest is not None:  # a session is looked up by a compiled kernel's hash: one without is no answer
            with self.lock:
                for session in self.sessions:
                    session[digest] = bool(cache_hit)

    def install(self) -> bool:
        """Make sure we are Triton's listener (keeping a user's as `previous`); False where Triton has none."""
        try:
            from triton import knobs
        except ImportError:  # pragma: no cover - Triton < 3.4
            return False
        compilation = knobs.compilation
        if not hasattr(compilation, "listener"):
            return False
        with self.lock:
            current = compilation.listener
            if current is not self:
                self.previous = current
                compilation.listener = self
        return True

    def capture(self) -> list:
        self.install()
        events: list = []
        self.local.events = events
        return events

    def release(self) -> None:
        self.local.events = None

    def session(self) -> dict[str, bool]:
        self.install()
        session: dict[str, bool] = {}
        with self.lock:
            self.sessions.append(session)
        return session

    def close(self, session: dict[str, bool]) -> None:
        with self.lock:
            self.sessions = [s for s in self.sessions if s is not session]


# One per process, because Triton has one listener slot (`knobs.compilation.listener`). Once installed it
# stays installed: a listener set after ours keeps ours as its `previous` and calls it, so taking ours out
# would cut that chain. It holds nothing between uses: events exist only between capture() and release()
# (per thread) and between session() and close(); outside them a call only forwards to `previous`.
LISTENER = CompileListener()
