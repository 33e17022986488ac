"""The trial table of `kernel.report()` and `autotune report`, and `render_report` (the table plus files)."""

from __future__ import annotations

from ..format import format_config, format_ms, format_record_key, format_table, one_line, safe_text
from ..kernel.occupancy import describe
from ..record import TuningRecord
from .export import PathLike, record_to_csv, record_to_json
from .plot import plot_trials
from .ranking import format_counts, format_ratio, ranked, ratio, reference_ms, remeasured

__all__ = ["report_table", "render_report"]


def report_table(record: TuningRecord, *, name: str | None = None) -> str:
    """Every trial as a text table, fastest first, failures last, under a one-line header.

    Header: `{kernel} {key} on {device}: {n} trials, {ok} ok, {failed} failed[, {skipped} skipped]; winner
    {Config} {median} ms; tuned in {s} s`. Columns: `rank` (`1*` marks the winner, `*` alone a winner launched
    without a time, `-` for the other unranked),
    Ranks follow the tuning's decision: the winner first, then the other configs re-measured side by side (their
    status says `ok, re-measured`), in that re-measurement's order, then the others by their own median (a record
    that does not say what it re-measured, as a sweep's split or a `shard` tuning writes, still ranks its winner 1).
    `config` (`BLOCK=64, num_warps=4`, then `[occupancy -> maxnreg=128]` for one with occupancy), `median ms`, `min ms`, `status`, `x-winner` (median over
    the winner's median), `error` (one line, at most 80 characters). `{kernel}` is `name` when given (`autotune
    report` names a kernel by its `kernel_id` where two modules' kernels of one name are reported), else the
    record's kernel name.
    """
    reference = reference_ms(record)
    rows = []
    for rank, trial in ranked(record):
        is_winner = trial.config == record.winner
        rows.append(
            [
                f"{rank}{'*' if is_winner else ''}" if rank is not None else ("*" if is_winner else "-"),
                format_config(trial.config, sep=", ") + describe(trial.lowered),
                format_ms(trial.median_ms),
                format_ms(trial.min_ms),
                f"{trial.status.value}, re-measured" if remeasured(record, trial) else trial.status.value,
                format_ratio(ratio(trial, reference)),
                one_line(trial.error, 80),
            ]
        )
    winner = record.winner_trial
    header = (
        f"{name or record.kernel} {format_record_key(record)} on {record.device}: {format_counts(record)}; "
        f"winner {record.winner!r} "
        f"{format_ms(winner.median_ms if winner else None)} ms; tuned in {record.tuning_s:.2f} s"
    )
    lines = format_table(
        ["rank", "config", "median ms", "min ms", "status", "x-winner", "error"], rows, right={0, 2, 3, 5}
    )
    return "\n".join([safe_text(header), lines])  # the header's names come from the entry too


def render_report(
    record: TuningRecord,
    *,
    png: PathLike | None = None,
    csv: PathLike | None = None,
    json: PathLike | None = None,
    name: str | None = None,
) -> str:
    """`report_table(record, name=name)`, and each given file written: what `kernel.report()` returns."""
    if png is not None:
        plot_trials(record, png)
    if csv is not None:
        record_to_csv(record, csv)
    if json is not None:
        record_to_json(record, json)
    return report_table(record, name=name)
