"""Seeing what a tuning did: the AUTOTUNE_PRINT lines, the trial table, a PNG bar chart, CSV and JSON export.

Everything here reads a finished `TuningRecord`; nothing here measures or tunes. The tuner calls
`emit()` once per tuning (a cache hit included); `kernel.report()` and the `autotune report` CLI
command call `render_report()` (the table, plus optional PNG/CSV/JSON files).

Print formats (stable: users grep them, tests pin them):

* Summary (`AUTOTUNE_PRINT=1`, and logged at INFO whatever the level), one line::

    autotune: add key=(1024,) float32 -> Config(BLOCK=64, num_warps=4) 0.01200 ms | top3: BLOCK=64,num_warps=4 0.01200 ms (x1.00); BLOCK=128,num_warps=4 0.01500 ms (x1.25); BLOCK=32,num_warps=4 0.02000 ms (x1.67) | 14/16 ok | tuned in 1.23 s (miss)

* Trials (`AUTOTUNE_PRINT=2` prints the summary then these; logged at DEBUG), one per trial,
  fastest first, failures last::

    autotune:   #1 ok            median 0.01200 ms  min 0.01100 ms  x1.00  Config(BLOCK=64, num_warps=4)
    autotune:   -- compile_error Config(BLOCK=256, num_warps=8)  error: CompilationError: at 3:8: ... ValueError(...)
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, TextIO, Union

from .errors import AutotuneError
from .options import env_print_level
from .record import Trial, TrialStatus, TuningRecord
from .space import Config

logger = logging.getLogger("autotune")

PathLike = Union[str, os.PathLike]

__all__ = [
    "format_summary", "format_trials", "emit", "report_table", "plot_trials", "render_report",
    "record_to_csv", "records_from_csv", "record_to_json", "record_from_json",
    "register_report_command", "run_report_command", "find_records",
]

# --------------------------------------------------------------------------------------------
# Small formatting helpers, shared by the print lines, the table and the chart.
# --------------------------------------------------------------------------------------------


def fmt_ms(value: Optional[float]) -> str:
    """Milliseconds with 4 significant digits (never exponent notation below 10 s); '-' for None."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    if value != 0 and abs(value) < 1e-4:
        return f"{value:.2e}"
    # 4 significant digits, fixed notation: 0.01234, 1.234, 123.4
    digits = max(0, 3 - int(math.floor(math.log10(abs(value))))) if value else 4
    return f"{value:.{digits}f}"


def _fmt_key(record: TuningRecord) -> str:
    """`key=(1024,) float32`: the key as a tuple, then the tensor dtypes (without `torch.`)."""
    key = "key=" + repr(tuple(record.key))
    if record.dtypes:
        key += " " + ",".join(d.removeprefix("torch.") for d in record.dtypes)
    return key


def _fmt_config_short(config: Config) -> str:
    """`BLOCK=64,num_warps=4`: a config with no spaces, for the summary's top-3 and the chart."""
    return ",".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in config.items())


def _one_line(error: Optional[str], limit: int) -> str:
    """An error message squeezed onto one line: the first line and, if different, the last one.

    Triton's compile errors start with a location (`at 3:8:`) and end with the actual exception,
    so both ends are kept; the middle (source excerpt, traceback) is dropped.
    """
    if not error:
        return ""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return ""
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    return text


def _is_ok(trial: Trial) -> bool:
    return trial.status is TrialStatus.OK and trial.median_ms is not None and math.isfinite(trial.median_ms)


def _ranked(record: TuningRecord) -> list[tuple[Optional[int], Trial]]:
    """Trials sorted fastest first by median, failures (and OK trials without a median) last.

    Returns `(rank, trial)` pairs; rank is 1-based for measured trials and None for failures.
    The sort is stable, so failures keep the record's order.
    """
    ok = sorted((t for t in record.trials if _is_ok(t)), key=lambda t: t.median_ms)  # type: ignore[arg-type, return-value]
    bad = [t for t in record.trials if not _is_ok(t)]
    return [(i + 1, t) for i, t in enumerate(ok)] + [(None, t) for t in bad]


def _reference_ms(record: TuningRecord) -> Optional[float]:
    """The median every ratio is taken against: the winner's, else the fastest OK trial's."""
    winner = record.winner_trial
    if winner is not None and _is_ok(winner):
        return winner.median_ms
    medians = [t.median_ms for t in record.trials if _is_ok(t)]
    return min(medians) if medians else None  # type: ignore[type-var]


def _ratio(trial: Trial, reference: Optional[float]) -> Optional[float]:
    if not _is_ok(trial) or not reference:
        return None
    return trial.median_ms / reference  # type: ignore[operator]


def _fmt_ratio(ratio: Optional[float]) -> str:
    return "-" if ratio is None else f"{ratio:.2f}"


# --------------------------------------------------------------------------------------------
# AUTOTUNE_PRINT lines and logging
# --------------------------------------------------------------------------------------------


def format_summary(record: TuningRecord, *, cache_hit: bool) -> str:
    """The one line printed per tuning with `AUTOTUNE_PRINT=1` (and logged at INFO).

    Exact format (single spaces; `|` separates the parts)::

        autotune: {kernel} key={key tuple}[ {dtype,dtype...}] -> {winner Config repr} {winner median} ms
          | top3: {cfg} {median} ms (x{ratio}); ... | {n ok}/{n trials} ok | tuned in {tuning_s:.2f} s ({hit})

    (on one line) where
      - `{key tuple}` is `repr(tuple(record.key))`, e.g. `(1024,)`; dtypes (without `torch.`) follow
        after a space, comma-separated, and are left out when the record has none;
      - `{cfg}` in the top-3 is the compact `BLOCK=64,num_warps=4` form, fastest first (the winner
        is normally the first), at most three entries, `x{ratio}` is the median over the winner's
        with two decimals;
      - milliseconds have 4 significant digits (`0.01200`, `1.234`, `123.4`, `1234`), `-` if unknown;
      - `{hit}` is `cache hit` when the record came from the cache, `miss` when it was just tuned
        (`tuned in` is then the original tuning's wall time as stored in the record).
    Example::

        autotune: add key=(1024,) float32 -> Config(BLOCK=64) 0.01200 ms | top3: BLOCK=64 0.01200 ms (x1.00);
        BLOCK=32 0.01500 ms (x1.25) | 2/3 ok | tuned in 1.23 s (miss)
    """
    reference = _reference_ms(record)
    winner = record.winner_trial
    winner_ms = winner.median_ms if winner is not None else None
    ranked = [t for rank, t in _ranked(record) if rank is not None]
    top = "; ".join(f"{_fmt_config_short(t.config)} {fmt_ms(t.median_ms)} ms (x{_fmt_ratio(_ratio(t, reference))})"
                    for t in ranked[:3]) or "-"
    n_ok = len(ranked)
    return (f"autotune: {record.kernel} {_fmt_key(record)} -> {record.winner!r} {fmt_ms(winner_ms)} ms"
            f" | top3: {top} | {n_ok}/{len(record.trials)} ok"
            f" | tuned in {record.tuning_s:.2f} s ({'cache hit' if cache_hit else 'miss'})")


def format_trials(record: TuningRecord) -> str:
    """The `AUTOTUNE_PRINT=2` lines (logged at DEBUG): one per trial, fastest first, failures last.

    Exact format of each line, for a measured trial and for one that produced no time::

        autotune:   {rank} {status:<13} median {median} ms  min {min} ms  x{ratio}  {Config repr}[  error: {error}]
        autotune:   -- {status:<13} {Config repr}[  error: {error}]

    `{rank}` is `#1`, `#2`, ... right-aligned to the widest rank (at least 2 characters), or `--`
    (aligned likewise) for a trial without a time; `{status}` is the `TrialStatus` value (`ok`, `compile_error`,
    `timeout`, `runtime_error`, `verify_failed`, `skipped`); numbers are formatted as in
    `format_summary` (`-` where absent) and `x{ratio}` is the median over the winner's; the
    error, present only when the trial has one, is squeezed onto one line (its first and last
    lines, at most 200 characters). Lines are joined with `\\n`, no trailing newline.
    """
    ranked = _ranked(record)
    reference = _reference_ms(record)
    rank_width = max([2] + [len(f"#{rank}") for rank, _ in ranked if rank is not None])
    lines = []
    for rank, trial in ranked:
        tag = f"#{rank}" if rank is not None else "--"
        line = f"autotune:   {tag:>{rank_width}} {trial.status.value:<13} "
        if rank is not None:
            line += (f"median {fmt_ms(trial.median_ms)} ms  min {fmt_ms(trial.min_ms)} ms"
                     f"  x{_fmt_ratio(_ratio(trial, reference))}  ")
        line += repr(trial.config)
        if trial.error:
            line += f"  error: {_one_line(trial.error, 200)}"
        lines.append(line)
    return "\n".join(lines)


def emit(record: TuningRecord, *, cache_hit: bool, level: Optional[int] = None,
         stream: Optional[TextIO] = None) -> None:
    """Report one finished tuning: print per `AUTOTUNE_PRINT` and always log to `autotune`.

    Prints to `stream` (default: `sys.stderr` at call time) the summary when `level` (default:
    `env_print_level()`) is >= 1, and the trial lines after it when >= 2. Independently, logs the
    summary at INFO and the trial lines at DEBUG on `logging.getLogger("autotune")`, so an
    application can route them with ordinary logging configuration. (With no handler configured,
    Python's last-resort handler shows only WARNING and above, so nothing is printed twice.)

    Never raises for a broken stream: observability must not fail a kernel launch.
    """
    if level is None:
        level = env_print_level()
    summary = format_summary(record, cache_hit=cache_hit)
    trials: Optional[str] = None
    if level >= 1:
        out = stream if stream is not None else sys.stderr
        text = summary + "\n"
        if level >= 2:
            trials = format_trials(record)
            if trials:
                text += trials + "\n"
        try:
            out.write(text)
            out.flush()
        except (OSError, ValueError):  # closed or broken stream
            pass
    logger.info("%s", summary)
    if logger.isEnabledFor(logging.DEBUG):
        if trials is None:
            trials = format_trials(record)
        if trials:
            logger.debug("%s", trials)


# --------------------------------------------------------------------------------------------
# The trial table
# --------------------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def render(cells: Sequence[str]) -> str:
        parts = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(parts).rstrip()

    return [render(headers), render(["-" * w for w in widths])] + [render(r) for r in rows]


def report_table(record: TuningRecord) -> str:
    """Every trial as a text table, fastest first, failures last, under a one-line header.

    Header: `{kernel} {key} on {device}: {n} trials, {ok} ok, {failed} failed; winner {Config}
    {median} ms; tuned in {s} s`. Columns: `rank` (`1*` marks the winner, `-` for failures),
    `config` (`BLOCK=64, num_warps=4`), `median ms`, `min ms`, `status`, `x-winner` (median over
    the winner's median), `error` (one line, at most 80 characters).
    """
    reference = _reference_ms(record)
    rows = []
    for rank, trial in _ranked(record):
        mark = "*" if trial.config == record.winner and rank is not None else ""
        rows.append([
            f"{rank}{mark}" if rank is not None else "-",
            ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in trial.config.items()),
            fmt_ms(trial.median_ms),
            fmt_ms(trial.min_ms),
            trial.status.value,
            _fmt_ratio(_ratio(trial, reference)),
            _one_line(trial.error, 80),
        ])
    n_ok = sum(1 for t in record.trials if _is_ok(t))
    winner = record.winner_trial
    header = (f"{record.kernel} {_fmt_key(record)} on {record.device}: {len(record.trials)} trials, {n_ok} ok, "
              f"{len(record.trials) - n_ok} failed; winner {record.winner!r} "
              f"{fmt_ms(winner.median_ms if winner else None)} ms; tuned in {record.tuning_s:.2f} s")
    lines = _table(["rank", "config", "median ms", "min ms", "status", "x-winner", "error"], rows,
                   right={0, 2, 3, 5})
    return "\n".join([header, *lines])


# --------------------------------------------------------------------------------------------
# The PNG bar chart
# --------------------------------------------------------------------------------------------

_BAR_IN = 0.22          # inches of figure height per trial bar
_MAX_HEIGHT_IN = 60.0   # 6000 px at 100 dpi: beyond this bars get thinner, labels sparser
_LABEL_MIN_IN = 0.14    # below this much height per bar, tick labels would overlap
_LABEL_TOP = 40         # when labels cannot all fit: the fastest N and every failure are labelled


def plot_trials(record: TuningRecord, path: PathLike, *, dpi: int = 100) -> Path:
    """Write `trial_figure(record)` as a PNG; return its path."""
    path = Path(path)
    fig = trial_figure(record, dpi=dpi)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def trial_figure(record: TuningRecord, *, dpi: int = 100) -> Any:
    """A matplotlib Figure with a horizontal bar chart of every trial's median time.

    Readable for hundreds of configs: one bar per trial, fastest at the top, the winner in a
    distinct colour, a tick mark at each trial's min; failed trials have no bar (they have no time): they
    sit at the bottom as red labels marked with a cross and their status. The figure grows with the number of trials (up to 60 in);
    when the labels would overlap, only the fastest 40 and the failures are labelled. A log time
    axis is used when the medians span more than 50x.

    Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend change, safe
    next to a user's own plotting). Raises `AutotuneError` if matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise AutotuneError('plotting trial times needs matplotlib: pip install "autotune[plot]"') from None

    ranked = _ranked(record)
    n = max(1, len(ranked))
    ok_ms = [t.median_ms for r, t in ranked if r is not None]
    span_max = max(ok_ms) if ok_ms else 1.0
    span_min = min(ok_ms) if ok_ms else 1.0
    log_axis = bool(ok_ms) and span_min > 0 and span_max / span_min > 50

    height = min(_MAX_HEIGHT_IN, max(3.0, 1.6 + _BAR_IN * n))
    label_all = (height - 1.6) / n >= _LABEL_MIN_IN
    labels = []
    for i, (rank, trial) in enumerate(ranked):
        text = _fmt_config_short(trial.config)
        if len(text) > 60:
            text = text[:57] + "..."
        if label_all or rank is None or i < _LABEL_TOP:
            labels.append(text if rank is not None else f"{text} [{trial.status.value}]")
        else:
            labels.append("")
    longest = max((len(s) for s in labels), default=10)
    width = min(26.0, max(9.0, 6.5 + 0.06 * longest))  # ~6 in of plot area right of the labels

    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")  # also places the suptitle
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    y = list(range(len(ranked)))
    fail_len = span_max * (1.05 if not log_axis else 1.5)   # where the axis ends: room for the value labels
    # Only measured configs get a bar: a failed config has no time, so it is a marked label at the bottom
    # (a red cross and its status), never a bar that would read as a time on the axis.
    measured = [(i, t) for i, (r, t) in enumerate(ranked) if r is not None]
    if measured:
        ax.barh([i for i, _ in measured], [t.median_ms for _, t in measured], height=0.8, linewidth=0,
                color=["#2ca02c" if t.config == record.winner else "#4c72b0" for _, t in measured])
    for i, (rank, trial) in enumerate(ranked):
        if rank is None:
            ax.text(0.005, i, f"\u2717 {trial.status.value}", transform=ax.get_yaxis_transform(), va="center",
                    ha="left", fontsize=7, color="#cc0000")
    if ranked:
        mins = [(i, t.min_ms) for i, (r, t) in enumerate(ranked) if r is not None and t.min_ms is not None]
        if mins:
            ax.plot([m for _, m in mins], [i for i, _ in mins], linestyle="none", marker="|", color="black",
                    markersize=max(2.0, min(8.0, 72 * (height - 1.6) / n * 0.6)), label="min")
    reference = _reference_ms(record)
    if reference:
        ax.axvline(reference, color="#2ca02c", linestyle="--", linewidth=0.8, label="winner median")
    if log_axis:
        ax.set_xscale("log")
    if ranked:
        # the median and ratio at the end of every labelled bar; the axis grows to make room
        value_font = 7 if label_all else 6
        for i, (rank, trial) in enumerate(ranked):
            if rank is not None and labels[i]:
                ratio = _ratio(trial, reference)
                ax.text(trial.median_ms, i, f" {fmt_ms(trial.median_ms)} ms (x{_fmt_ratio(ratio)})",
                        va="center", ha="left", fontsize=value_font, clip_on=True)
        if log_axis:
            ax.set_xlim(span_min / 1.5, fail_len * 4)
        else:
            ax.set_xlim(0, fail_len * 1.3)
    ax.set_yticks(y)
    font = 8 if label_all else 6
    ax.set_yticklabels(labels, fontsize=font)
    for tick, (rank, _) in zip(ax.get_yticklabels(), ranked):
        if rank is None:
            tick.set_color("#cc0000")
    if ranked:
        ax.set_ylim(len(ranked) - 0.5, -0.5)  # fastest at the top
    ax.set_xlabel("median time per launch (ms)" + (", log scale" if log_axis else ""))
    n_fail = sum(1 for r, _ in ranked if r is None)
    title = f"{record.kernel} {_fmt_key(record)} on {record.device}\n{len(ranked)} configs"
    if n_fail:
        title += f", {n_fail} failed (marked \u2717 with their status, at the bottom)"
    if not label_all:
        title += f"; fastest {_LABEL_TOP} labelled"
    title += f"; tuned in {record.tuning_s:.2f} s"
    fig.suptitle(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    if reference or ok_ms:
        ax.legend(loc="upper right", fontsize=8)  # the fastest bars, at the top, are the shortest
    return fig


# --------------------------------------------------------------------------------------------
# CSV and JSON
# --------------------------------------------------------------------------------------------

_CSV_COLUMNS = ["kernel", "key", "rank", "winner", "config", "status", "median_ms", "min_ms", "x_winner",
                "samples_ms", "error", "compile_s"]


def record_to_csv(record: TuningRecord, path_or_file: Union[PathLike, TextIO]) -> None:
    """Write one row per trial, in the record's order, as CSV (header row first).

    Columns: `kernel`, `key` (JSON), `rank` (empty for failures), `winner` (`1`/`0`), `config`
    (the config as JSON, the column `records_from_csv` reads back), `status`, `median_ms`, `min_ms`,
    `x_winner`, `samples_ms` (JSON list), `error`, `compile_s`, then one `cfg.FIELD` column per
    config field (the union over trials) for spreadsheets. Floats are written with `repr`, so
    they read back exactly; None is an empty cell.
    """
    ranks = {id(t): r for r, t in _ranked(record)}
    reference = _reference_ms(record)
    fields: list[str] = []
    for trial in record.trials:
        for name in trial.config:
            if name not in fields:
                fields.append(name)
    header = _CSV_COLUMNS + [f"cfg.{f}" for f in fields]
    key_json = json.dumps(list(record.key))

    def cell(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return repr(value)
        return str(value)

    def write(fh: TextIO) -> None:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        for trial in record.trials:
            rank = ranks.get(id(trial))
            ratio = _ratio(trial, reference)
            row = [record.kernel, key_json, cell(rank), "1" if trial.config == record.winner else "0",
                   trial.config.canonical(), trial.status.value, cell(trial.median_ms), cell(trial.min_ms),
                   cell(ratio), json.dumps(trial.samples_ms), cell(trial.error), cell(trial.compile_s)]
            row += [json.dumps(trial.config[f]) if f in trial.config else "" for f in fields]
            writer.writerow(row)

    if hasattr(path_or_file, "write"):
        write(path_or_file)  # type: ignore[arg-type]
    else:
        target = Path(path_or_file)  # type: ignore[arg-type]
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", newline="", encoding="utf-8") as fh:
            write(fh)


def records_from_csv(path_or_file: Union[PathLike, TextIO]) -> list[Trial]:
    """Read the trials back from a CSV written by `record_to_csv`, in file order.

    Uses the `config`, `status`, `median_ms`, `min_ms`, `samples_ms`, `error` and `compile_s`
    columns (the others are derived and ignored). An empty `error` cell reads as None.
    """
    def parse_float(text: str) -> Optional[float]:
        return float(text) if text != "" else None

    def read(fh: TextIO) -> list[Trial]:
        trials = []
        for row in csv.DictReader(fh):
            try:
                trials.append(Trial(
                    config=Config.from_json(json.loads(row["config"])),
                    status=TrialStatus(row["status"]),
                    median_ms=parse_float(row.get("median_ms", "")),
                    min_ms=parse_float(row.get("min_ms", "")),
                    samples_ms=json.loads(row["samples_ms"]) if row.get("samples_ms") else [],
                    error=row.get("error") or None,
                    compile_s=parse_float(row.get("compile_s", "") or ""),
                ))
            except (KeyError, ValueError, TypeError) as exc:
                raise AutotuneError(f"not an autotune trials CSV (line {len(trials) + 2}): {exc}") from None
        return trials

    if hasattr(path_or_file, "read"):
        return read(path_or_file)  # type: ignore[arg-type]
    with open(path_or_file, newline="", encoding="utf-8") as fh:  # type: ignore[arg-type]
        return read(fh)


def record_to_json(record: TuningRecord, path_or_file: Union[PathLike, TextIO]) -> None:
    """Write the whole record (every field the disk cache stores) as indented JSON."""
    text = record.model_dump_json(indent=2)
    if hasattr(path_or_file, "write"):
        path_or_file.write(text)  # type: ignore[union-attr]
        return
    target = Path(path_or_file)  # type: ignore[arg-type]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "\n", encoding="utf-8")


def record_from_json(path_or_file: Union[PathLike, TextIO]) -> TuningRecord:
    """Read a record written by `record_to_json` (pydantic validation; nothing is evaluated)."""
    if hasattr(path_or_file, "read"):
        text = path_or_file.read()  # type: ignore[union-attr]
    else:
        text = Path(path_or_file).read_text(encoding="utf-8")  # type: ignore[arg-type]
    return TuningRecord.model_validate_json(text)


# --------------------------------------------------------------------------------------------
# kernel.report() and the CLI
# --------------------------------------------------------------------------------------------


def render_report(record: TuningRecord, *, png: Optional[PathLike] = None, csv: Optional[PathLike] = None,
                  json: Optional[PathLike] = None) -> str:
    """`report_table(record)`, and each given file written: what `kernel.report()` returns."""
    if png is not None:
        plot_trials(record, png)
    if csv is not None:
        record_to_csv(record, csv)
    if json is not None:
        record_to_json(record, json)
    return report_table(record)


def _kernel_matches(record_kernel: str, name: str) -> bool:
    """`add` matches a record of `add`, `pkg.mod.add`, `pkg.mod:add` and `pkg.mod.Cls.add`."""
    if record_kernel == name:
        return True
    return any(record_kernel.endswith(sep + name) for sep in (".", ":"))


def _normalise(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_normalise(v) for v in value)
    return value


def _key_matches(record: TuningRecord, text: str) -> bool:
    """Does `--key TEXT` select this record? TEXT is read by `autotune.keyspec.parse_key`, as by every
    subcommand; the printed key (`(1024,) float32`, spaces ignored) matches too. Every dtype variant matches."""
    from .cache import key_text
    from .keyspec import parse_key

    try:
        if key_text(parse_key(text)) == key_text(record.key):
            return True
    except ValueError:
        return False
    printed = _fmt_key(record).removeprefix("key=")
    squeeze = lambda s: "".join(s.split())  # noqa: E731
    return squeeze(text) in (squeeze(printed), squeeze(repr(_normalise(record.key))))


def _cache_entries(cache_root: Optional[PathLike] = None) -> list[Any]:
    """Every entry file of the disk cache (`autotune.cache.disk_entries`), readable or not."""
    from .cache import disk_entries

    return disk_entries(None, cache_root)


def find_records(kernel: str, key: Optional[str] = None, *,
                 cache_root: Optional[PathLike] = None) -> list[TuningRecord]:
    """The disk cache's records of `kernel` (see `_kernel_matches`), optionally of one key; oldest first.

    Reads through `autotune.cache.disk_entries` (JSON only, validated; nothing is evaluated);
    unreadable entries are skipped here and reported by the CLI command.
    """
    return _select(_cache_entries(cache_root), kernel, key)


def _select(entries: Iterable[Any], kernel: str, key: Optional[str]) -> list[TuningRecord]:
    records = [e.record for e in entries if e.record is not None and _kernel_matches(e.record.kernel, kernel)]
    if key is not None:
        records = [r for r in records if _key_matches(r, key)]
    return sorted(records, key=lambda r: r.timestamp)


def _path_for(path: str, record: TuningRecord, many: bool) -> Path:
    """With several records to write, `out.png` becomes `out-1024_float32.png` per record."""
    target = Path(path)
    if not many:
        return target
    parts = [str(v) for v in _normalise(record.key)] + [d.removeprefix("torch.") for d in record.dtypes]
    tag = "_".join("".join(c if c.isalnum() or c in "-." else "-" for c in p) for p in parts) or "nokey"
    return target.with_name(f"{target.stem}-{tag}{target.suffix}")


def run_report_command(args: argparse.Namespace, *, out: Optional[TextIO] = None) -> int:
    """`autotune report KERNEL [--key K] [--png F] [--csv F] [--json F]`: exit status 0, or 1 if nothing matched."""
    out = out if out is not None else sys.stdout
    root = getattr(args, "cache_dir", None)
    entries = _cache_entries(root)
    for entry in entries:
        if entry.record is None and _kernel_matches(entry.kernel, args.kernel):
            print(f"autotune report: skipping unreadable entry: {entry.error}", file=sys.stderr)
    records = _select(entries, args.kernel, args.key)
    if not records:
        what = f"kernel {args.kernel!r}" + (f" key {args.key!r}" if args.key else "")
        known = sorted({e.record.kernel for e in entries if e.record is not None})
        hint = f"; cached kernels: {', '.join(known)}" if known else "; the cache has no records"
        if args.key and any(_kernel_matches(k, args.kernel) for k in known):
            keys = sorted({_fmt_key(e.record).removeprefix("key=") for e in entries
                           if e.record is not None and _kernel_matches(e.record.kernel, args.kernel)})
            hint = f"; its cached keys: {'; '.join(keys)}"
        print(f"autotune report: no cached tuning for {what}{hint}", file=sys.stderr)
        return 1
    many = len(records) > 1
    for i, record in enumerate(records):
        if i:
            out.write("\n")
        try:
            table = render_report(
                record,
                png=_path_for(args.png, record, many) if args.png else None,
                csv=_path_for(args.csv, record, many) if args.csv else None,
                json=_path_for(args.json, record, many) if args.json else None,
            )
        except AutotuneError as exc:
            print(f"autotune report: {exc}", file=sys.stderr)
            return 1
        out.write(table + "\n")
        for option in ("png", "csv", "json"):
            value = getattr(args, option)
            if value:
                out.write(f"wrote {_path_for(value, record, many)}\n")
    return 0


def register_report_command(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> argparse.ArgumentParser:
    """Add `report` to the CLI's subparsers; the parsed namespace's `func` runs it.

    `func(args) -> int` is `run_report_command` (the exit status).
    """
    parser = subparsers.add_parser(
        "report", help="show a kernel's cached trials as a table, optionally as PNG/CSV/JSON",
        description="Print every trial of a kernel's cached tunings (one table per key) from the disk cache "
                    "(AUTOTUNE_CACHE_DIR), and optionally write a PNG bar chart, a CSV and the JSON record. "
                    "With several keys and a file option, each file name gets the key appended.")
    parser.add_argument("kernel", metavar="KERNEL", help="kernel name (its function name, or the qualified name)")
    parser.add_argument("--key", default=None,
                        help="only this key: 1024, '1024,512', '(1024, 512)' or JSON '[1024, 512]'; "
                             "every dtype variant matches")
    parser.add_argument("--png", metavar="FILE", default=None, help="write a bar chart of trial times (needs autotune[plot])")
    parser.add_argument("--csv", metavar="FILE", default=None, help="write the trials as CSV")
    parser.add_argument("--json", metavar="FILE", default=None, help="write the whole tuning record as JSON")
    parser.add_argument("--cache-dir", metavar="DIR", default=None, help="cache directory (default: AUTOTUNE_CACHE_DIR or ~/.cache/autotune)")
    parser.set_defaults(func=run_report_command)
    return parser
