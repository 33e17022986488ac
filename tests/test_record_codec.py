"""Records and options through msgspec: the on-disk format is the one the pydantic version wrote, round trips
are exact, and `Tuning` checks itself when made, naming the field, the value and the choices."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import OptionError, Trial, TrialStatus, Tuning, TuningRecord, codec
from autotune.space import Config
from autotune.storage.entries import parse_record, record_json

OLD_ENTRY = Path(__file__).parent / "data" / "entry_written_with_pydantic.json"


def test_an_entry_written_by_the_pydantic_version_reads_back_and_is_rewritten_byte_for_byte():
    data = OLD_ENTRY.read_bytes()
    record = parse_record(data, OLD_ENTRY)
    assert record.winner == Config(BLOCK=64, num_warps=4) and isinstance(record.winner, Config)
    assert record.key == [4096, "torch.float32", [1, 2]]
    assert [t.status for t in record] == [TrialStatus.OK, TrialStatus.COMPILE_ERROR, TrialStatus.SKIPPED]
    assert record[0].samples_ms == [0.5, 0.25, 0.75] and record[1].error == "out of shared memory"
    assert record.strategy == "model" and record.space_size == 3 and record.candidates is None
    # the stored format did not change with the library; the fields added since read back as null
    added = b' "search": null,\n "where": null,\n "remeasured": null,\n'
    assert record_json(record) == data.replace(b' "tuning_s"', added + b' "tuning_s"')


def test_a_record_read_back_is_validated():
    bad = OLD_ENTRY.read_text().replace('"median_ms": 0.5', '"median_ms": -0.5')
    with pytest.raises(Exception, match=r"trials\[0\]\.median_ms"):
        parse_record(bad.encode(), "entry")
    with pytest.raises(codec.ValidationError, match="winner"):
        TuningRecord.from_json(OLD_ENTRY.read_text().replace('"winner": {', '"winner": {"1x": 2, '))


ms = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
trials = st.builds(
    Trial,
    config=st.builds(lambda b, w: Config(BLOCK=b, num_warps=w), st.integers(1, 4096), st.sampled_from([1, 2, 4, 8])),
    status=st.sampled_from(list(TrialStatus)),
    median_ms=st.none() | ms,
    min_ms=st.none() | ms,
    samples_ms=st.lists(ms, max_size=5),
    error=st.none() | st.text(max_size=40),
    compile_s=st.none() | ms,
).filter(lambda t: t.status is not TrialStatus.OK or t.median_ms is not None)  # an "ok" trial has its median


@settings(max_examples=60, deadline=None)
@given(
    st.lists(trials, min_size=1, max_size=4),
    st.lists(st.integers(-(2**40), 2**40) | st.text(max_size=8) | st.booleans(), max_size=3),
    ms,
)
def test_a_record_round_trips_through_its_entry_bytes(trial_list, key, tuning_s):
    record = TuningRecord(
        kernel="k",
        source_hash="s",
        device="d",
        triton_version="t",
        torch_version="v",
        space_checksum="c",
        key=tuple(key),
        winner=dict(trial_list[0].config),
        trials=trial_list,
        tuning_s=tuning_s,
    )
    assert record.key == list(key) and isinstance(record.winner, Config)  # normalised when made
    again = parse_record(record_json(record), "entry")
    assert again == record
    assert codec.from_builtins(codec.to_builtins(record), TuningRecord) == record  # the worker-reply path


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"reps": 0}, r"reps: Expected `int` >= 1 \(got 0\)"),
        ({"compile_timeout_s": -1.0}, r"compile_timeout_s: Expected `float` > 0.0 \(got -1.0\)"),
        ({"force": "yes"}, r"force: Expected `bool`, got `str`"),
        ({"preset": "quick"}, r"preset: .*'quick'; use one of: 'fast', 'default', 'thorough'"),
        ({"isolate": "always"}, r"isolate: .*'always'; use one of: 'auto', 'process', 'off'"),
    ],
)
def test_tuning_checks_itself_when_made(fields, message):
    with pytest.raises(OptionError, match=message):
        Tuning(**fields)
    with pytest.raises(OptionError, match=message):
        Tuning.coerce(fields)


def test_tuning_presets_fill_what_is_not_given_and_replace_is_checked():
    fast = Tuning(preset="fast", reps=3)
    assert (fast.reps, fast.warmup, fast.max_configs) == (3, 1, 64)
    assert fast.replace(seed=7).seed == 7 and fast.replace(seed=7).reps == 3
    with pytest.raises(OptionError, match="warmup"):
        fast.replace(warmup=-1)
    with pytest.raises(OptionError, match="'rep' is not a Tuning field.*Did you mean 'reps'"):
        Tuning.coerce({"rep": 5})
    assert Tuning(preset="fast") == Tuning.coerce("fast") and hash(Tuning()) == hash(Tuning())
