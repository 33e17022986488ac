"""The PNG bar chart of a record's trials (matplotlib, the `plot` extra; imported only when drawing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import AutotuneError
from ..format import format_config, format_ms, format_record_key, one_line, shorten
from ..record import TuningRecord
from . import ranking
from .export import PathLike
from .ranking import format_ratio, outcome_counts, reference_ms

__all__ = ["plot_trials", "trial_figure"]

_BAR_IN = 0.22  # inches of figure height per trial bar
_MAX_HEIGHT_IN = 60.0  # 6000 px at 100 dpi: beyond this bars get thinner, labels sparser
_LABEL_MIN_IN = 0.14  # below this much height per bar, tick labels would overlap
_LABEL_TOP = 40  # when labels cannot all fit: the fastest N and every failure are labelled
# Every text is drawn as written: a config value, key or device name (read from a cache entry) holding two `$` would
# otherwise be parsed as mathtext (`$x^$` made savefig raise), and under `text.usetex` as LaTeX.
_LITERAL = {"parse_math": False, "usetex": False}


def plot_trials(record: TuningRecord, path: PathLike, *, dpi: int = 100) -> Path:
    """Write `trial_figure(record)` as a PNG; return its path. A figure matplotlib cannot draw is an
    `AutotuneError` naming the record; a file that cannot be written is the OSError."""
    path = Path(path)
    try:
        fig = trial_figure(record, dpi=dpi)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    except (ValueError, RuntimeError, OverflowError) as exc:  # matplotlib's own: an image too large, a bad value
        raise AutotuneError(
            f"cannot draw the chart of {record.kernel} {format_record_key(record)} on {record.device}: "
            f"{exc.__class__.__name__}: {one_line(str(exc), 200).rstrip('.')}; leave out the PNG (the table, CSV "
            "and JSON do not need it)"
        ) from None
    return path


def trial_figure(record: TuningRecord, *, dpi: int = 100) -> Any:
    """A matplotlib Figure with a horizontal bar chart of every trial's median time.

    Readable for hundreds of configs: one bar per trial, fastest at the top, the winner in a
    distinct colour, a tick mark at each trial's min; failed trials have no bar (they have no time): they
    sit at the bottom as red labels marked with a cross and their status. The figure grows with the number of
    trials (up to 60 in); when the labels would overlap, only the fastest 40 and the failures are labelled. A log
    time axis is used when the medians span more than 50x.

    Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend change, safe
    next to a user's own plotting). Raises `AutotuneError` if matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise AutotuneError('plotting trial times needs matplotlib: pip install "autotune[plot]"') from None

    chart = _Chart(record)
    fig = Figure(figsize=(chart.width, chart.height), dpi=dpi, layout="constrained")  # also places the suptitle
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    chart.draw_bars(ax)
    chart.draw_values(ax)
    chart.draw_labels(ax)
    fig.suptitle(chart.title(), fontsize=10, **_LITERAL)
    ax.grid(axis="x", alpha=0.3)
    if chart.reference or chart.ok_ms:
        ax.legend(loc="upper right", fontsize=8)  # the fastest bars, at the top, are the shortest
    return fig


class _Chart:
    """What the figure shows of a record: the ranked trials, the axis span, the labels and the figure's size."""

    def __init__(self, record: TuningRecord) -> None:
        self.record = record
        self.ranked = ranking.ranked(record)
        self.n = max(1, len(self.ranked))
        self.ok_ms = [ranking.median_of(t) for r, t in self.ranked if r is not None]
        self.span_max = max(self.ok_ms) if self.ok_ms else 1.0
        self.span_min = min(self.ok_ms) if self.ok_ms else 1.0
        self.log_axis = bool(self.ok_ms) and self.span_min > 0 and self.span_max / self.span_min > 50
        self.height = min(_MAX_HEIGHT_IN, max(3.0, 1.6 + _BAR_IN * self.n))
        self.label_all = (self.height - 1.6) / self.n >= _LABEL_MIN_IN
        self.labels = [self._label(i, rank, trial) for i, (rank, trial) in enumerate(self.ranked)]
        longest = max((len(s) for s in self.labels), default=10)
        self.width = min(26.0, max(9.0, 6.5 + 0.06 * longest))  # ~6 in of plot area right of the labels
        self.reference = reference_ms(record)

    def _label(self, i: int, rank: int | None, trial: Any) -> str:
        text = shorten(format_config(trial.config), 60)
        if self.label_all or rank is None or i < _LABEL_TOP:
            return text if rank is not None else f"{text} [{trial.status.value}]"
        return ""

    def draw_bars(self, ax: Any) -> None:
        """A bar per measured config, a red cross per failed one (it has no time), a tick at each min."""
        measured = [(i, t) for i, (r, t) in enumerate(self.ranked) if r is not None]
        if measured:
            ax.barh(
                [i for i, _ in measured],
                [ranking.median_of(t) for _, t in measured],
                height=0.8,
                linewidth=0,
                color=["#2ca02c" if t.config == self.record.winner else "#4c72b0" for _, t in measured],
            )
        for i, (rank, trial) in enumerate(self.ranked):
            if rank is None:
                ax.text(
                    0.005,
                    i,
                    f"\u2717 {trial.status.value}",
                    transform=ax.get_yaxis_transform(),
                    va="center",
                    ha="left",
                    fontsize=7,
                    color="#cc0000",
                    **_LITERAL,
                )
        mins = [(i, t.min_ms) for i, (r, t) in enumerate(self.ranked) if r is not None and t.min_ms is not None]
        if mins:
            ax.plot(
                [m for _, m in mins],
                [i for i, _ in mins],
                linestyle="none",
                marker="|",
                color="black",
                markersize=max(2.0, min(8.0, 72 * (self.height - 1.6) / self.n * 0.6)),
                label="min",
            )
        if self.reference:
            ax.axvline(self.reference, color="#2ca02c", linestyle="--", linewidth=0.8, label="winner median")
        if self.log_axis:
            ax.set_xscale("log")

    def draw_values(self, ax: Any) -> None:
        """The median and ratio at the end of every labelled bar; the axis grows to make room."""
        if not self.ranked:
            return
        value_font = 7 if self.label_all else 6
        for i, (rank, trial) in enumerate(self.ranked):
            if rank is not None and self.labels[i]:
                ratio = ranking.ratio(trial, self.reference)
                ax.text(
                    ranking.median_of(trial),
                    i,
                    f" {format_ms(trial.median_ms)} ms (x{format_ratio(ratio)})",
                    va="center",
                    ha="left",
                    fontsize=value_font,
                    clip_on=True,
                    **_LITERAL,
                )
        axis_end = self.span_max * (1.05 if not self.log_axis else 1.5)
        if self.log_axis:
            ax.set_xlim(self.span_min / 1.5, axis_end * 4)
        else:
            ax.set_xlim(0, axis_end * 1.3)

    def draw_labels(self, ax: Any) -> None:
        ax.set_yticks(list(range(len(self.ranked))))
        ax.set_yticklabels(self.labels, fontsize=8 if self.label_all else 6, **_LITERAL)
        for tick, (rank, _) in zip(ax.get_yticklabels(), self.ranked):
            if rank is None:
                tick.set_color("#cc0000")
        if self.ranked:
            ax.set_ylim(len(self.ranked) - 0.5, -0.5)  # fastest at the top
        ax.set_xlabel("median time per launch (ms)" + (", log scale" if self.log_axis else ""))

    def title(self) -> str:
        record = self.record
        _, n_fail, n_skipped = outcome_counts(record)
        title = f"{record.kernel} {format_record_key(record)} on {record.device}\n{len(self.ranked)} configs"
        if n_fail or n_skipped:
            unranked = [f"{n_fail} failed"] * bool(n_fail) + [f"{n_skipped} skipped"] * bool(n_skipped)
            title += f", {' and '.join(unranked)} (marked \u2717 with their status, at the bottom)"
        if not self.label_all:
            title += f"; fastest {_LABEL_TOP} labelled"
        return title + f"; tuned in {record.tuning_s:.2f} s"
