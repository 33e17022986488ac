"""The AUTOTUNE_PRINT lines of a finished tuning, and their logging. The tuner calls `emit()` once per
tuning (a cache hit from disk included).

Print formats (stable: users grep them, tests pin them):

* Summary (`AUTOTUNE_PRINT=1`, and logged at INFO whatever the level), one line::

    autotune: add key=(1024,) float32 -> Config(BLOCK=64, num_warps=4) 0.01200 ms | top3: BLOCK=64,num_warps=4 0.01200 ms (x1.00); BLOCK=128,num_warps=4 0.01500 ms (x1.25); BLOCK=32,num_warps=4 0.02000 ms (x1.67) | 14/16 ok | tuned in 1.23 s (miss)

* Trials (`AUTOTUNE_PRINT=2` prints the summary then these; logged at DEBUG), one per trial,
  fastest first, failures last::

    autotune:   #1 ok            median 0.01200 ms  min 0.01100 ms  x1.00  Config(BLOCK=64, num_warps=4)
    autotune:   -- compile_error Config(BLOCK=256, num_warps=8)  error: CompilationError: at 3:8: ... ValueError(...)
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from ..format import format_config, format_ms, format_record_key, one_line, safe_text
from ..kernel.occupancy import describe
from ..options import env_print_level
from ..record import TuningRecord
from . import ranking
from .ranking import format_ratio, ratio, reference_ms

__all__ = ["format_summary", "format_trials", "emit"]

logger = logging.getLogger("autotune")


def format_summary(record: TuningRecord, *, cache_hit: bool) -> str:
    """The one line printed per tuning with `AUTOTUNE_PRINT=1` (and logged at INFO).

    Exact format (single spaces; `|` separates the parts)::

        autotune: {kernel} key={key tuple}[ {dtype,dtype...}] -> {winner Config repr} {winner median} ms
          | top3: {cfg} {median} ms (x{ratio}); ... | {n ok}/{n measured or failed} ok[, {n} skipped][ | {strategy}: {n} of {size} tried]
          | tuned in {tuning_s:.2f} s[ {where}] ({hit})

    (on one line) where
      - `{key tuple}` is `repr(tuple(record.key))`, e.g. `(1024,)`; dtypes (without `torch.`) follow
        after a space, comma-separated, and are left out when the record has none;
      - `{cfg}` in the top-3 is the compact `BLOCK=64,num_warps=4` form, fastest first (the winner
        is normally the first), at most three entries, `x{ratio}` is the median over the winner's
        with two decimals;
      - milliseconds have 4 significant digits (`0.01200`, `1.234`, `123.4`, `1234`), `-` if unknown;
      - the `{strategy}` part appears when a search strategy tried part of the space (not exhaustive);
      - a winner with `occupancy` is followed by what it became when compiled, as `[occupancy -> maxnreg=128]`
        (`occupancy.describe`);
      - a winner tuned for a set of calls (`Tuning.objective`) adds, before `tuned in`, the part
        `| geomean of {n} calls: {median} ms ({call}); ...` (or `max of`): its median on each call, in the order of
        `record.calls`, at most eight (then `; ... {k} more`);
      - `{where}` is where the trials ran, `in-process` or `in a worker process` (left out for an entry that
        does not say);
      - `{hit}` is `cache hit` when the record came from the cache, `miss` when it was just tuned
        (`tuned in` is then the original tuning's wall time as stored in the record).
    Example::

        autotune: add key=(1024,) float32 -> Config(BLOCK=64) 0.01200 ms | top3: BLOCK=64 0.01200 ms (x1.00);
        BLOCK=32 0.01500 ms (x1.25) | 2/3 ok | tuned in 1.23 s (miss)
    """
    reference = reference_ms(record)
    winner = record.winner_trial
    winner_ms = winner.median_ms if winner is not None else None
    ranked = [t for rank, t in ranking.ranked(record) if rank is not None]
    top = (
        "; ".join(
            f"{format_config(t.config)} {format_ms(t.median_ms)} ms (x{format_ratio(ratio(t, reference))})"
            for t in ranked[:3]
        )
        or "-"
    )
    n_ok, n_failed, n_skipped = ranking.outcome_counts(record)
    skipped = f", {n_skipped} skipped" if n_skipped else ""
    return (
        f"autotune: {record.kernel} {format_record_key(record)} -> {record.winner!r}"
        f"{describe(winner.lowered if winner is not None else None)} {format_ms(winner_ms)} ms"
        f" | top3: {top} | {n_ok}/{n_ok + n_failed} ok{skipped}{_searched(record)}{_per_call(record)}"
        f" | tuned in {record.tuning_s:.2f} s{_where(record)} ({'cache hit' if cache_hit else 'miss'})"
    )


_CALLS_SHOWN = 8  # per-call times the summary line shows; the trial lines show them all


def _per_call(record: TuningRecord) -> str:
    """` | geomean of 2 calls: 1.000 ms (x[1024]); 2.000 ms (x[4096])`: the winner's median on each call of a
    multi-call tuning (`Tuning.objective`); nothing otherwise."""
    winner = record.winner_trial
    times = winner.calls_ms if winner is not None else None
    if not record.objective or not isinstance(times, list) or not times:
        return ""
    described = record.calls if isinstance(record.calls, list) else []
    parts = [
        f"{format_ms(ms)} ms ({described[i]})" if i < len(described) else f"{format_ms(ms)} ms"
        for i, ms in enumerate(times[:_CALLS_SHOWN])
    ]
    more = len(times) - _CALLS_SHOWN
    return f" | {record.objective} of {len(times)} calls: {'; '.join(parts)}" + (
        f"; ... {more} more" if more > 0 else ""
    )


def _where(record: TuningRecord) -> str:
    """` in-process` or ` in a worker process`: where the trials ran; nothing for an entry that does not say."""
    return {"in-process": " in-process", "worker process": " in a worker process"}.get(record.where or "", "")


def _searched(record: TuningRecord) -> str:
    """` | model: 87 of 4362 tried` for a searched (not exhaustive) tuning; nothing otherwise."""
    if record.strategy is None:
        return ""
    size = f" of {record.space_size:,}" if record.space_size is not None else ""
    return f" | {record.strategy}: {len(record.trials)}{size} tried{_prior_text(record)}"


def _prior_text(record: TuningRecord) -> str:
    """`, prior: <device> (<source>), winner #3 in its order` for a search that started from another device's
    record; nothing otherwise."""
    if record.prior is None:
        return ""
    rank = record.prior.winner_rank
    where = f"winner #{rank} in its order" if rank is not None else "winner not in its order"
    return f", prior: {record.prior.device} ({record.prior.source}), {where}"


def format_trials(record: TuningRecord) -> str:
    """The `AUTOTUNE_PRINT=2` lines (logged at DEBUG): one per trial, fastest first, failures last.

    Exact format of each line, for a measured trial and for one that produced no time::

        autotune:   {rank} {status:<13} median {median} ms  min {min} ms  x{ratio}  [calls {ms} / {ms} ms  ]{Config repr}[ [occupancy -> ...]][  error: {error}]
        autotune:   -- {status:<13} {Config repr}[ [occupancy -> ...]][  error: {error}]

    `{rank}` is `#1`, `#2`, ... right-aligned to the widest rank (at least 2 characters), or `--`
    (aligned likewise) for a trial without a time; `{status}` is the `TrialStatus` value (`ok`, `compile_error`,
    `timeout`, `runtime_error`, `verify_failed`, `skipped`); numbers are formatted as in
    `format_summary` (`-` where absent) and `x{ratio}` is the median over the winner's; `calls` (a tuning for a
    set of calls, `Tuning.objective`) is the trial's median on each call, in the order of `record.calls`; the
    error, present only when the trial has one, is squeezed onto one line (its first and last
    lines, at most 200 characters). Lines are joined with `\\n`, no trailing newline.
    """
    ranked = ranking.ranked(record)
    reference = reference_ms(record)
    rank_width = max([2] + [len(f"#{rank}") for rank, _ in ranked if rank is not None])
    lines = []
    for rank, trial in ranked:
        tag = f"#{rank}" if rank is not None else "--"
        line = f"autotune:   {tag:>{rank_width}} {trial.status.value:<13} "
        if rank is not None:
            line += (
                f"median {format_ms(trial.median_ms)} ms  min {format_ms(trial.min_ms)} ms"
                f"  x{format_ratio(ratio(trial, reference))}  "
            )
            if isinstance(trial.calls_ms, list) and trial.calls_ms:
                line += f"calls {' / '.join(format_ms(ms) for ms in trial.calls_ms)} ms  "
        line += repr(trial.config) + describe(trial.lowered)
        if trial.error:
            line += f"  error: {one_line(trial.error, 200)}"
        lines.append(line)
    return "\n".join(lines)


def _escaped_lines(text: str) -> str:
    return "\n".join(safe_text(line) for line in text.split("\n"))


def emit(record: TuningRecord, *, cache_hit: bool, level: int | None = None, stream: TextIO | None = None) -> None:
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
    summary = safe_text(format_summary(record, cache_hit=cache_hit))  # a kernel name, a dtype: read from an entry
    trials: str | None = None
    if level >= 1:
        out = stream if stream is not None else sys.stderr
        text = summary + "\n"
        if level >= 2:
            trials = _escaped_lines(format_trials(record))
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
            trials = _escaped_lines(format_trials(record))
        if trials:
            logger.debug("%s", trials)
