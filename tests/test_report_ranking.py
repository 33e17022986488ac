"""`report` ranks as the tuning decided: the configs re-measured side by side first, in that re-measurement's order
(the winner is rank 1), then the rest by their first measurement; the re-measured rows say so."""

from __future__ import annotations

import csv

import torch
from test_report import make_record, ok, vector_add

from autotune import Config, Tuning, autotune
from autotune.reporting import format_trials, report_table
from autotune.reporting.ranking import ranked


def test_the_winner_of_the_re_measurement_is_rank_1_though_a_first_pass_median_was_lower():
    quick, winner, second = Config(BLOCK=16), Config(BLOCK=32), Config(BLOCK=64)
    record = make_record(
        [ok(quick, 92.81), ok(winner, 93.06), ok(second, 93.5)], winner=winner, remeasured=[winner, second]
    )
    assert [(rank, t.config) for rank, t in ranked(record)] == [(1, winner), (2, second), (3, quick)]
    rows = report_table(record).splitlines()[3:]  # after the header, the column names and the rule
    assert rows[0].lstrip().startswith("1*") and "BLOCK=32" in rows[0] and "ok, re-measured" in rows[0]
    assert "ok, re-measured" in rows[1] and "re-measured" not in rows[2]
    assert format_trials(record).splitlines()[0].lstrip().startswith("autotune:   #1 ok")
    old = make_record([ok(quick, 92.81), ok(winner, 93.06)], winner=winner)  # an entry that does not say
    assert [(rank, t.config) for rank, t in ranked(old)] == [(1, winner), (2, quick)]


def test_a_real_tuning_records_what_it_re_measured_winner_first():
    add = autotune(
        space={"BLOCK": [32, 64, 128]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(compile_workers=0, warmup=0, reps=2, refine_topk=2, refine_reps=2),
    )(vector_add)
    x, y, out = torch.rand(200), torch.rand(200), torch.empty(200)
    add(x, y, out, 200)
    record = add.record()
    assert len(record.remeasured) == 2 and record.remeasured[0] == record.winner
    assert ranked(record)[0][1].config == record.winner


def test_a_record_that_does_not_say_what_it_re_measured_ranks_its_winner_first(tmp_path):
    """A sweep's split tuning and a `shard` tuning write no `remeasured`: the winner's median is the final
    re-measurement's, slower here than another config's first pass, and it still ranks 1 everywhere."""
    from autotune.reporting import record_to_csv, records_from_csv
    from autotune.reporting.plot import trial_figure

    fast_once, winner, slow = Config(BLOCK=16), Config(BLOCK=32), Config(BLOCK=64)
    record = make_record([ok(fast_once, 0.9), ok(slow, 1.5), ok(winner, 1.0)], winner=winner)
    assert record.remeasured is None
    assert [(rank, t.config) for rank, t in ranked(record)] == [(1, winner), (2, fast_once), (3, slow)]
    rows = report_table(record).splitlines()[3:]
    assert rows[0].lstrip().startswith("1*") and "BLOCK=32" in rows[0] and "re-measured" not in rows[0]
    assert format_trials(record).splitlines()[0].lstrip().startswith("autotune:   #1 ok")
    assert "BLOCK=32" in format_trials(record).splitlines()[0]
    record_to_csv(record, tmp_path / "t.csv")
    with open(tmp_path / "t.csv", newline="") as fh:
        ranks = {row["cfg.BLOCK"]: row["rank"] for row in csv.DictReader(fh)}
    assert ranks == {"32": "1", "16": "2", "64": "3"} and len(records_from_csv(tmp_path / "t.csv")) == 3
    labels = [t.get_text() for t in trial_figure(record).axes[0].get_yticklabels()]
    assert labels[0] == "BLOCK=32"
