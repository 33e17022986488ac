"""Review 33: a lazy space's checksum follows every value its filter reads (slots, global objects, nested tables,
generator expressions, values set after where()); occupancy beside maxnreg under an unrelated filter; -0.0 keys
from numpy; a lazy FixedSpace's samples and neighbours without listing it."""

from __future__ import annotations

import dataclasses
import random
import types

import pytest
from hash_seeds import printed_under_hash_seeds

from autotune.errors import SpaceError
from autotune.space import CartesianSpace, Config, FixedSpace


def big() -> CartesianSpace:
    return CartesianSpace(A=range(1, 65), B=range(1, 65), C=range(1, 65))


# ---------------------------------------------------------------------------------------------- filter identity
class Slotted:
    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __call__(self, c: Config) -> bool:
        return c["A"] <= self.limit


@dataclasses.dataclass(frozen=True, slots=True)
class Limit:
    limit: int

    def keep(self, c: Config) -> bool:
        return c["A"] <= self.limit


def test_a_slots_filter_object_s_attributes_are_in_the_checksum():
    """A callable object with __slots__, or a bound method of a slots dataclass, has no __dict__: its attributes
    were hashed as nothing, so two filters keeping different configs shared cache entries."""
    assert big().where(Slotted(8)).checksum() != big().where(Slotted(64)).checksum()
    assert big().where(Limit(8).keep).checksum() != big().where(Limit(64).keep).checksum()
    assert big().where(Slotted(8)).checksum() == big().where(Slotted(8)).checksum()


class Settings:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sub = types.SimpleNamespace(cap=64)

    def allows(self, a: int) -> bool:
        return a <= self.limit


CFG = Settings(64)
TABLE = {"A": {"max": 64}, "B": [1, {"max": 2}]}
SETTINGS = types.ModuleType("s33_settings")
SETTINGS.LIMIT = 64  # type: ignore[attr-defined]
LIMIT = 64


def by_attribute(c: Config) -> bool:
    return c["A"] <= CFG.limit


def by_nested_attribute(c: Config) -> bool:
    return c["A"] <= CFG.sub.cap


def by_method(c: Config) -> bool:
    return CFG.allows(c["A"])


def by_table(c: Config) -> bool:
    return c["A"] <= TABLE["A"]["max"]


def by_module_in_genexpr(c: Config) -> bool:
    return all(c[k] <= SETTINGS.LIMIT for k in ("A", "B"))


def by_global(c: Config) -> bool:
    return c["A"] <= LIMIT


@pytest.mark.parametrize(
    "pred, change",
    [
        (by_attribute, lambda: setattr(CFG, "limit", 8)),
        (by_nested_attribute, lambda: setattr(CFG.sub, "cap", 8)),
        (by_table, lambda: TABLE["A"].update(max=8)),
        (by_module_in_genexpr, lambda: setattr(SETTINGS, "LIMIT", 8)),
    ],
    ids=["object-attribute", "nested-object-attribute", "nested-dict", "module-in-genexpr"],
)
def test_a_global_the_filter_reads_through_is_in_the_checksum(pred, change):
    """An object global (`CFG.limit`), a nested table (`TABLE["A"]["max"]`) and a module constant read in a
    generator expression were hashed as their type, or not at all: a changed value kept the checksum."""
    before = big().where(pred).checksum()
    saved = (CFG.limit, CFG.sub.cap, TABLE["A"]["max"], SETTINGS.LIMIT)  # type: ignore[attr-defined]
    try:
        change()
        assert big().where(pred).checksum() != before
    finally:
        CFG.limit, CFG.sub.cap, TABLE["A"]["max"], SETTINGS.LIMIT = saved  # type: ignore[attr-defined]
    assert big().where(pred).checksum() == before


def test_a_filter_calling_a_method_of_a_global_object_is_accepted_and_its_state_is_not_hashed():
    """A method the filter calls on a global object is hashed by its name, not followed (it may use super() or a
    memo, whose contents would change the checksum as the filter runs); a counter the filter itself assigns is
    not hashed either."""
    before = big().where(by_method).checksum()
    CFG.calls = 41  # type: ignore[attr-defined]
    assert big().where(by_method).checksum() == before
    counting = big().where(counts)
    first = counting.checksum()
    STATS.refused = 99
    assert big().where(counts).checksum() == first


class _Stats:
    refused = 0


STATS = _Stats()


def counts(c: Config) -> bool:
    keep = c["A"] <= LIMIT
    STATS.refused += not keep
    return keep


SETTINGS._CAP = 64  # type: ignore[attr-defined]


class Memo:
    seen: dict = {}


def by_private_module_constant(c: Config) -> bool:
    return c["A"] <= SETTINGS._CAP


def by_memo(c: Config) -> bool:
    Memo.seen[c["A"]] = True
    return c["A"] <= LIMIT


def test_a_private_module_constant_is_hashed_and_a_memo_through_a_class_is_not():
    """What was hashed before stays hashed (a module's `_CAP`, as a constant); a table reached through a class,
    which a filter may fill as it runs, is not (its checksum would change with every process's history)."""
    before = big().where(by_private_module_constant).checksum()
    SETTINGS._CAP = 8  # type: ignore[attr-defined]
    try:
        assert big().where(by_private_module_constant).checksum() != before
    finally:
        SETTINGS._CAP = 64  # type: ignore[attr-defined]
    fresh = big().where(by_memo).checksum()
    Memo.seen[5] = True
    assert big().where(by_memo).checksum() == fresh


def test_a_table_that_holds_itself_is_hashed_at_once():
    root: dict = {"max": 64}
    root["children"] = [{"parent": root} for _ in range(16)]
    TABLES["root"] = root
    assert big().where(by_cyclic_table).checksum()  # the table has no stable text: hashed by its type, at once


TABLES: dict = {}


def by_cyclic_table(c: Config) -> bool:
    return c["A"] <= TABLES["root"]["max"]


def test_a_filter_s_identity_is_taken_at_the_first_checksum_not_at_where():
    """A global set after the space was built (a command-line flag read at startup) is hashed as the filter reads
    it when the checksum is first asked for."""
    global LIMIT
    space = big().where(by_global)
    at_64 = big().where(by_global).checksum()
    try:
        LIMIT = 8
        assert space.checksum() == big().where(by_global).checksum() != at_64
        assert not space.contains(Config(A=30, B=1, C=1))
    finally:
        LIMIT = 64


def test_a_captured_object_is_still_refused():
    def make(o):
        return lambda c: c["A"] <= o.limit

    with pytest.raises(SpaceError, match="captured o = .*Settings object"):
        big().where(make(CFG))


def test_filters_reading_objects_and_tables_hash_the_same_in_every_process():
    code = (
        "import types\n"
        "from autotune.space import CartesianSpace\n"
        "class S:\n"
        "    __slots__ = ('limit',)\n"
        "    def __init__(self, limit): self.limit = limit\n"
        "    def __call__(self, c): return c['A'] <= self.limit\n"
        "class Cfg:\n"
        "    def __init__(self): self.limit, self.names = 8, {'b', 'a'}\n"
        "CFG = Cfg()\n"
        "TABLE = {'A': {'max': 8, 'tags': ('x',)}, 'B': [1, 2]}\n"
        "def keep(c): return c['A'] <= CFG.limit and all(c[k] <= TABLE['A']['max'] for k in CFG.names)\n"
        "space = CartesianSpace(A=range(64), B=range(64), C=range(64))\n"
        "print(space.where(S(8)).checksum(), space.where(keep).checksum())\n"
    )
    outputs = printed_under_hash_seeds(code, ("0", "1", "2"))
    assert outputs[0] and len(set(outputs)) == 1


# ---------------------------------------------------------------------------------------------- end to end
def test_a_widened_slots_filter_retunes_instead_of_serving_the_narrow_winner():
    torch = pytest.importorskip("torch")
    import triton
    import triton.language as tl

    import autotune

    @triton.jit
    def k3(x, out, n, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
        offs = tl.program_id(0) * 64 + tl.arange(0, 64)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + A, mask=mask)

    tuning = autotune.Tuning(preset="fast", max_configs=2, strategy="random")
    x, out = torch.zeros(64), torch.empty(64)
    narrow = autotune.autotune(space=big().where(Slotted(2)), key=["n"], grid=(1,), tuning=tuning)(k3)
    narrow(x, out, 64)
    assert narrow.best_config is not None and narrow.best_config["A"] <= 2
    wide = autotune.autotune(space=big().where(Slotted(64)), key=["n"], grid=(1,), tuning=tuning)(k3)
    assert wide.cache.space_checksum != narrow.cache.space_checksum
    launches = [0]
    real = wide.fn.run

    def counting(*args, **kwargs):
        launches[0] += 1
        return real(*args, **kwargs)

    wide.fn.run = counting
    wide(x, out, 64)
    assert launches[0] > 1  # tuned over the wider space, not the narrow winner served from the cache


# ---------------------------------------------------------------------------------------------- occupancy knobs
def _validate(space) -> None:
    from autotune.kernel.compile_options import compile_option_names
    from autotune.space.checks import validate_space

    validate_space(
        space,
        kernel_name="k",
        constexpr_names=["BLOCK", "U", "V"],
        compile_options=compile_option_names(),
        static_options={},
    )


def test_a_filter_unrelated_to_occupancy_and_maxnreg_does_not_hide_a_space_setting_both():
    space = CartesianSpace(BLOCK=range(1, 101), U=range(1, 101), V=range(1, 31), occupancy=(2,), maxnreg=(64, 96))
    assert space.lazy
    with pytest.raises(SpaceError, match="sets both occupancy and maxnreg"):
        _validate(space.where("$BLOCK >= 1"))
    with pytest.raises(SpaceError, match="sets both occupancy and maxnreg"):
        _validate(space.where("$BLOCK >= 1") + CartesianSpace(BLOCK=(1,), U=(1,), V=(1,)))
    apart = CartesianSpace(
        BLOCK=range(1, 101), U=range(1, 101), V=range(1, 31), occupancy=(None, 2), maxnreg=(None, 64)
    )
    _validate(apart.where("$occupancy is None or $maxnreg is None"))  # a filter on them may keep them apart
    _validate(apart.where(lambda c: c["maxnreg"] is None))  # a callable: what it reads is not known


# ---------------------------------------------------------------------------------------------- -0.0 keys
def test_a_numpy_negative_zero_key_is_stored_as_zero():
    np = pytest.importorskip("numpy")
    from autotune.keys import KeyBuilder, normalise_key
    from autotune.storage.entries import key_text

    builder = KeyBuilder(["alpha"], arg_names=["x", "alpha"])
    key = builder({"x": None, "alpha": np.float64(-0.0)})[0]
    assert key_text(key) == key_text(builder({"x": None, "alpha": 0.0})[0]) == "[0.0]"
    assert key_text(normalise_key([np.float64(-0.0)])) == "[0.0]"


def test_report_key_negative_zero_finds_the_entry_stored_as_zero():
    from test_report import make_record, ok

    from autotune.reporting.lookup import key_matches

    record = make_record([ok(Config(A=1), 1.0)], key=[0.0])
    assert key_matches(record, "-0.0")
    assert key_matches(record, "0.0")
    assert not key_matches(record, "1.0")


# ---------------------------------------------------------------------------------------------- big FixedSpace
class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, c: Config) -> bool:
        self.calls += 1
        return c["A"] % 7 != 0


def test_a_lazy_filtered_fixed_space_samples_and_finds_neighbours_without_listing_itself():
    """Each filtered sample() and each neighbours() listed the whole space again (a list this size is never kept):
    the filter ran over all its items at every call."""
    items = [{"A": a, "B": b} for a in range(400) for b in range(251)]  # 100,400: lazy
    counting = Counting()
    space = FixedSpace(items).where(counting)
    assert space.lazy
    rng = random.Random(0)
    samples = [space.sample(rng) for _ in range(20)]
    assert all(c["A"] % 7 for c in samples) and len(set(samples)) > 1
    assert counting.calls < 1_000
    counting.calls = 0
    config = Config(A=3, B=5)
    around = space.neighbours(config)
    space.neighbours(config)
    assert counting.calls <= 2 * (400 + 251)
    assert Config(A=3, B=6) in around and Config(A=4, B=5) in around and Config(A=7, B=5) not in around
    assert all((c["A"] == 3) != (c["B"] == 5) for c in around) and len(around) == 400 - 58 - 1 + 250


class Sizes(list):
    pass


SIZES = Sizes([16, 32, 64])


def by_list_subclass(c: Config) -> bool:
    return c["A"] in SIZES


def test_a_list_subclass_global_keeps_the_text_it_had_before_tables_were_walked():
    """Walking nested tables must not change what was hashed before (existing entries stay valid): a list
    subclass of scalars is named by its own class, as `stable_text` names it."""
    global SIZES
    from autotune.space.checksum import filter_identity

    named = filter_identity(by_list_subclass)
    saved, SIZES = SIZES, [16, 32, 64]  # type: ignore[assignment]
    try:
        assert filter_identity(by_list_subclass) != named  # "Sizes(16, 32, 64)" against "list(16, 32, 64)"
    finally:
        SIZES = saved
    assert filter_identity(by_list_subclass) == named
