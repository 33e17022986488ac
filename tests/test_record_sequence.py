"""A TuningRecord is the documented sequence of trials (DESIGN section 6): len, iteration, indexing."""

from __future__ import annotations

import pytest
import torch
from kernels_for_tests import add_kernel

from autotune import Trial, TuningRecord, autotune


def test_record_of_a_real_tuning_is_a_sequence_of_trials() -> None:
    tuned = autotune(
        space={"BLOCK": [32, 64, 128]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning={"warmup": 0, "reps": 1, "force": True},
    )(add_kernel)
    x = torch.arange(200, dtype=torch.float32)
    out = torch.empty_like(x)
    tuned(x, x, out, 200)
    record = tuned.record()
    assert isinstance(record, TuningRecord)
    assert len(record) == 3
    trials = list(record)
    assert all(isinstance(t, Trial) for t in trials)
    assert [dict(t.config)["BLOCK"] for t in trials] == [32, 64, 128]
    assert record[0] is record.trials[0] and record[-1] is record.trials[-1]
    assert [t.config for t in record[1:]] == [t.config for t in record.trials[1:]]
    assert record.winner in {t.config for t in record}  # metadata fields still there
    assert record.to_dict()["kernel"] == record.kernel  # and the dict form through to_dict


def test_record_indexed_by_a_field_name_says_how_to_read_the_field() -> None:
    tuned = autotune(
        space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning={"warmup": 0, "reps": 1, "force": True}
    )(add_kernel)
    x = torch.ones(64)
    tuned(x, x, torch.empty_like(x), 64)
    with pytest.raises(TypeError, match="record.winner"):
        tuned.record()["winner"]
