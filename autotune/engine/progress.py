"""A progress bar for long tunings: tqdm on stderr, only on a terminal, only after a second.

The tuner opens one `TuningProgress` per tuning and reports each config's compile, measurement
or failure to it. The bar is created only when `AUTOTUNE_PROGRESS` is not `0` and the stream is
a terminal; tqdm's `delay=` keeps it hidden for tunings shorter than `delay_s`, so quick tunings
and every non-interactive run (CI logs, pipes, files) see no progress output at all. When the
bar is off, every method returns at once.

Bar text, e.g.::

    autotune add key=(1024,):  40%|████      | 8/20 [00:01<00:01, 6.1cfg/s, compiled 12 | measured 7 | failed 1 | best 0.01200 ms BLOCK=64,num_warps=4]

The bar advances when a config is finished (measured or failed); its "best" is the first pass's fastest
(refinement's re-measurement, which picks the winner, is not shown: the record and `AUTOTUNE_PRINT` name it). Counts come first in the postfix so that a
narrow terminal trims the config, not the numbers.
"""

from __future__ import annotations

import functools
import math
import sys
import threading
from typing import Any, TextIO

from ..format import format_config, format_ms, shorten
from ..options import env_progress

__all__ = ["TuningProgress"]


class TuningProgress:
    """Context manager for the progress of one tuning (one kernel, one key, `total` configs).

    `TuningProgress(kernel_name, key, total, stream=None, delay_s=1.0)`: `stream` defaults to
    `sys.stderr` (looked up when constructed); the bar is made only if `env_progress()` and
    `stream.isatty()`, and shows only once the tuning has run `delay_s` seconds.

    Report with `compiled(config)`, `measured(config, median_ms)`, `failed(config, status)`;
    `close()` (or leaving the `with` block, also on an exception or Ctrl-C) removes the bar.
    Calls are serialised by a lock, so reporting from pool threads is safe too, although the
    tuner reports everything from the calling thread.
    """

    def __init__(
        self,
        kernel_name: str,
        key: tuple,
        total: int,
        *,
        stream: TextIO | None = None,
        delay_s: float = 1.0,
        strategy: str | None = None,
        space_size: int | None = None,
    ) -> None:
        self.kernel_name = kernel_name
        self.strategy, self.space_size = strategy, space_size
        self.key = key
        self.total = int(total)
        self.n_compiled = 0
        self.n_measured = 0
        self.n_failed = 0
        self.best_ms: float | None = None
        self.best_config: Any = None
        self._finished: set[Any] = set()
        self._lock = threading.Lock()
        self._bar: Any = None
        out = stream if stream is not None else sys.stderr
        if out is None or not env_progress():
            return
        try:
            interactive = bool(out.isatty())
        except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
            interactive = False
        if not interactive:
            return
        self._bar = _make_bar(self._description(), self.total, out, delay_s)

    @property
    def enabled(self) -> bool:
        """Whether a bar exists (it may still be hidden by the delay)."""
        return self._bar is not None

    def _description(self) -> str:
        key = shorten(repr(tuple(self.key)) if isinstance(self.key, (tuple, list)) else repr(self.key), 40)
        searched = f" {self.strategy} of {self.space_size:,}" if self.strategy and self.space_size else ""
        return f"autotune {self.kernel_name} key={key}{searched}"

    def _postfix(self) -> str:
        text = f"compiled {self.n_compiled} | measured {self.n_measured} | failed {self.n_failed}"
        if self.best_ms is not None:
            text += f" | best {format_ms(self.best_ms)} ms {format_config(self.best_config)}"
        return text

    def _advance(self, config: Any) -> int:
        """1 the first time `config` finishes (measured or failed), else 0."""
        try:
            if config in self._finished:
                return 0
            self._finished.add(config)
        except TypeError:  # an unhashable config: count it every time
            pass
        return 1

    def _update(self, step: int) -> None:
        # refresh=False + update(): tqdm then honours its delay and minimum interval itself.
        self._bar.set_postfix_str(self._postfix(), refresh=False)
        self._bar.update(step)

    def compiled(self, config: Any) -> None:
        """A config finished compiling (it will be measured next)."""
        if self._bar is None:
            return
        with self._lock:
            if self._bar is None:
                return
            self.n_compiled += 1
            self._update(0)

    def measured(self, config: Any, median_ms: float) -> None:
        """A config was measured; tracks the best median so far."""
        self._finish(config, median_ms)

    def failed(self, config: Any, status: Any) -> None:
        """A config failed (`status` is a `TrialStatus` or its value); it counts as finished."""
        self._finish(config, None)

    def _finish(self, config: Any, median_ms: float | None) -> None:
        """A config finished: measured with `median_ms`, or failed (None)."""
        if self._bar is None:
            return
        with self._lock:
            if self._bar is None:
                return
            step = self._advance(config)
            if median_ms is None:
                self.n_failed += step
            else:
                self.n_measured += step
                if math.isfinite(median_ms) and (self.best_ms is None or median_ms < self.best_ms):
                    self.best_ms = float(median_ms)
                    self.best_config = config
            self._update(step)

    def close(self) -> None:
        """Remove the bar (if it was ever shown, it is refreshed with the final counts first). Idempotent."""
        if self._bar is None:
            return
        with self._lock:
            bar, self._bar = self._bar, None
            if bar is None:
                return
            try:
                if bar.last_print_t >= bar.start_t + bar.delay:  # it has been displayed
                    bar.set_postfix_str(self._postfix(), refresh=False)
                    bar.refresh()
            finally:
                bar.close()

    def __enter__(self) -> TuningProgress:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


@functools.cache
def _bar_class() -> type:
    """tqdm without its monitor thread (tuning must leave no thread behind); imported on first use."""
    from tqdm import tqdm

    class _Bar(tqdm):  # type: ignore[misc, valid-type, unused-ignore]  # tqdm is Any without its stubs
        monitor_interval = 0

    return _Bar


def _make_bar(desc: str, total: int, stream: TextIO, delay_s: float) -> Any:
    """A bar that shows after `delay_s` seconds and leaves no line behind when closed."""
    return _bar_class()(
        total=total,
        desc=desc,
        file=stream,
        delay=max(0.0, float(delay_s)),
        leave=False,
        unit="cfg",
        miniters=0,
        mininterval=0.1,
        dynamic_ncols=True,
    )
