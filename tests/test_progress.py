"""The tuning progress bar: only on a terminal, only after the delay, off with AUTOTUNE_PROGRESS=0."""

from __future__ import annotations

import io
import threading

import pytest

from autotune.engine.progress import TuningProgress
from autotune.record import TrialStatus
from autotune.space import Config


class FakeTTY(io.StringIO):
    """A text stream that says it is a terminal, so the bar gets drawn into a string."""

    def isatty(self) -> bool:
        return True


def drive(progress: TuningProgress) -> None:
    """Four configs: three compile, two measure (one twice, as refinement does), one fails."""
    a, b, c, d = (Config(BLOCK=b) for b in (16, 32, 64, 128))
    for config in (a, b, c):
        progress.compiled(config)
    progress.measured(a, 0.5)
    progress.measured(b, 0.25)
    progress.failed(d, TrialStatus.COMPILE_ERROR)
    progress.measured(a, 0.125)  # refinement: a new best, but no new finished config


def test_no_output_when_the_stream_is_not_a_terminal():
    stream = io.StringIO()
    with TuningProgress("add", (1024,), 4, stream=stream, delay_s=0) as progress:
        assert not progress.enabled
        drive(progress)
    assert stream.getvalue() == ""


def test_default_stream_is_stderr_and_a_captured_stderr_gets_nothing(capsys):
    with TuningProgress("add", (1024,), 4, delay_s=0) as progress:
        assert not progress.enabled
        drive(progress)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_a_terminal_shows_the_bar_with_counts_and_best():
    stream = FakeTTY()
    with TuningProgress("add", (1024,), 4, stream=stream, delay_s=0) as progress:
        assert progress.enabled
        drive(progress)
        assert (progress.n_compiled, progress.n_measured, progress.n_failed) == (3, 2, 1)
        assert progress.best_ms == 0.125 and progress.best_config == Config(BLOCK=16)
    text = stream.getvalue()
    assert "autotune add key=(1024,)" in text
    assert "compiled 3 | measured 2 | failed 1 | best 0.1250 ms BLOCK=16" in text
    assert "3/4" in text and "4/4" not in text and "5/4" not in text
    assert text.endswith("\r")  # closing clears the line: no bar is left on the terminal


def test_autotune_progress_0_turns_the_bar_off(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_PROGRESS", "0")
    stream = FakeTTY()
    with TuningProgress("add", (1024,), 4, stream=stream, delay_s=0) as progress:
        assert not progress.enabled
        drive(progress)
    assert stream.getvalue() == ""


def test_short_tunings_show_nothing_even_on_a_terminal():
    stream = FakeTTY()
    with TuningProgress("add", (1024,), 4, stream=stream) as progress:  # default delay: 1 s
        assert progress.enabled
        drive(progress)
    assert stream.getvalue() == ""


def test_disabled_methods_are_no_ops_and_close_is_idempotent():
    progress = TuningProgress("add", (1,), 2, stream=io.StringIO())
    drive(progress)
    assert (progress.n_compiled, progress.n_measured, progress.n_failed, progress.best_ms) == (0, 0, 0, None)
    progress.close()
    progress.close()
    stream = FakeTTY()
    progress = TuningProgress("add", (1,), 2, stream=stream, delay_s=0)
    progress.close()
    progress.close()
    drive(progress)  # after close: ignored, nothing raised
    assert progress.n_compiled == 0


def test_the_bar_is_closed_when_the_block_raises():
    stream = FakeTTY()
    with pytest.raises(KeyboardInterrupt):
        with TuningProgress("add", (1,), 2, stream=stream, delay_s=0) as progress:
            progress.compiled(Config(BLOCK=1))
            raise KeyboardInterrupt
    assert not progress.enabled
    assert stream.getvalue().endswith("\r")


def test_no_thread_is_left_behind():
    before = set(threading.enumerate())
    with TuningProgress("add", (1,), 2, stream=FakeTTY(), delay_s=0) as progress:
        drive(progress)
    assert set(threading.enumerate()) <= before


def test_a_stream_without_isatty_or_a_closed_one_disables_the_bar():
    class NoTTY:
        def write(self, text: str) -> None:  # pragma: no cover - never called
            raise AssertionError("nothing should be written")

    assert not TuningProgress("add", (1,), 2, stream=NoTTY(), delay_s=0).enabled  # type: ignore[arg-type]

    class ClosedTTY(io.StringIO):
        def isatty(self) -> bool:
            raise ValueError("I/O operation on closed file")

    assert not TuningProgress("add", (1,), 2, stream=ClosedTTY(), delay_s=0).enabled


def test_long_keys_are_shortened_in_the_description():
    stream = FakeTTY()
    with TuningProgress("matmul", tuple(range(40)), 1, stream=stream, delay_s=0):
        pass
    first = stream.getvalue().split("\r")[1]
    assert first.startswith("autotune matmul key=(0, 1, 2") and "...:" in first


# ------------------------------------------------------------------------------------------ a real tuning

import triton  # noqa: E402  (after conftest has set TRITON_INTERPRET=1 on a machine without a GPU)
import triton.language as tl  # noqa: E402


@triton.jit
def progress_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def _tune_on(stderr, monkeypatch) -> None:
    import sys

    import torch

    from autotune import Tuning, autotune

    add = autotune(
        space={"BLOCK": (48, 64, 128)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(preset="fast", reps=2, warmup=0, compile_workers=2),
    )(progress_add)
    x, y, out = torch.ones(100), torch.ones(100), torch.empty(100)
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stderr", stderr)
        add(x, y, out, 100)
    torch.testing.assert_close(out, x + y)


def test_real_tuning_on_a_terminal_draws_the_bar(monkeypatch):
    # the decorator uses the default delay (1 s); make it 0 so this short tuning shows its bar
    monkeypatch.setattr(
        TuningProgress.__init__, "__kwdefaults__", {**TuningProgress.__init__.__kwdefaults__, "delay_s": 0.0}
    )
    stream = FakeTTY()
    _tune_on(stream, monkeypatch)
    text = stream.getvalue()
    if not text:
        pytest.fail("no progress bar: the tuner does not report to autotune.engine.progress.TuningProgress")
    assert "autotune progress_add key=(100,)" in text
    assert "measured 2 | failed 1 | best" in text and "3/3" in text


def test_real_tuning_with_stderr_not_a_terminal_writes_no_progress(monkeypatch):
    monkeypatch.setattr(
        TuningProgress.__init__, "__kwdefaults__", {**TuningProgress.__init__.__kwdefaults__, "delay_s": 0.0}
    )
    stream = io.StringIO()
    _tune_on(stream, monkeypatch)
    assert stream.getvalue() == ""


def test_a_search_tuning_s_bar_names_the_strategy_the_space_size_and_the_best(monkeypatch):
    """A search tries a budget of a space: the bar says which strategy, of how many configs, and the best so far."""
    import sys

    import torch

    from autotune import CartesianSpace, Tuning, autotune

    monkeypatch.setattr(
        TuningProgress.__init__, "__kwdefaults__", {**TuningProgress.__init__.__kwdefaults__, "delay_s": 0.0}
    )
    add = autotune(
        space=CartesianSpace(BLOCK=(16, 32, 64, 128, 256, 512)),
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(
            strategy="random", max_configs=3, seed=0, reps=1, warmup=0, refine_topk=0, compile_workers=0, isolate="off"
        ),
    )(progress_add)
    x, y, out = torch.ones(100), torch.ones(100), torch.empty(100)
    stream = FakeTTY()
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stderr", stream)
        add(x, y, out, 100)
    text = stream.getvalue()
    assert "autotune progress_add key=(100,) random of 6" in text, text
    assert "3/3" in text and "4/3" not in text and "| best " in text and "ms BLOCK=" in text
