"""Lazy spaces (too large to list): their checksum (the cache key) in every process, len(), and `space + list`."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
from hash_seeds import REPO, printed_under_hash_seeds

from autotune.errors import SpaceError
from autotune.space import CartesianSpace, Config, FixedSpace


def big() -> CartesianSpace:
    return CartesianSpace(A=range(1000), B=range(1000))


def fits(c: Config, smem: int) -> bool:
    return c.A * c.B <= smem


class Fits:
    def __init__(self, smem: int) -> None:
        self.smem = smem

    def __call__(self, c: Config) -> bool:
        return c.A * c.B <= self.smem


# ---------------------------------------------------------------------------------------------- eager checksums
def test_an_eager_space_s_checksum_is_the_one_its_cache_entries_were_written_under():
    """Golden values computed before lazy checksums changed: a listed space's checksum must never move, or every
    existing cache entry would go stale."""
    assert (
        CartesianSpace(BLOCK=(32, 64, 128), num_warps=(2, 4, 8)).checksum()
        == "15dbb027c6546468b894fd7493c786157392373a499886f36321a3c1c1259f83"
    )
    assert (
        CartesianSpace(BLOCK=(32, 64, 128), num_warps=(2, 4, 8)).where("$BLOCK * $num_warps <= 256").checksum()
        == "f889d94bf3a0e0373d96d775f666d37e5ef06a8cb06693f9328c2e0ca08ba4eb"
    )
    assert (
        CartesianSpace(BLOCK=(32, 64, 128), num_warps=(2, 4, 8)).where(lambda c: c.BLOCK > 32).checksum()
        == "b96f53e0f5f7c28eb336d6319ff6de9538c4f5e7dca75e0da16590864258f65d"
    )
    assert (
        FixedSpace(
            [{"BLOCK": 32}, {"BLOCK": 64, "num_warps": 4}, {"A": "x", "T": (1, 2)}, {"BLOCK": 1.5}, {"B": None}]
        ).checksum()
        == "2f1388ff9f6407b3a426eab40bb8529512048b4b2dff40007ace2239fbd7d7a1"
    )
    assert (
        CartesianSpace(BLOCK=(32, 64)) + FixedSpace([{"BLOCK": 128}, {"BLOCK": 32}])
    ).checksum() == "78440f65ee9687d0e495ab92a0a286538f620ffc369ff59a09112886f621766e"
    assert (
        (CartesianSpace(BLOCK=(32, 64)) + FixedSpace([{"BLOCK": 128}])).where("$BLOCK > 32")
    ).checksum() == "00a0bacc39312230aaf2cddbe9548a3cb474888fd4336027e1466276b54b1610"
    # a lazy space filtered by a $X string: its text alone since 0.1.0's 2026-11-25 change (it hashed the compiled
    # function's bytecode too, which differs between Python versions)
    assert big().where("$A < 5").checksum() == "c50ab1ce4fb892e24f66886f0e9b93b238bc68bed4433a61c55f5fb442500479"


def test_a_lazy_space_s_checksum_does_not_depend_on_the_bytecode_of_its_filters(tmp_path):
    """A deployment or a fleet node on another Python version (other bytecode) finds the same entries: a lazy space's
    checksum reads a `def` filter's source and a `$X` string's text. `python -OO` compiles the same source to other
    bytecode (no assert, no docstring), as another Python version would."""
    (tmp_path / "filters_mod.py").write_text(
        'def fits(c):\n    """Tiles that fit."""\n    assert c.A >= 0\n    return c.A * c.B <= 4096\n'
    )
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from filters_mod import fits\n"
        "from autotune.space import CartesianSpace\n"
        "big = CartesianSpace(A=range(1000), B=range(1000))\n"
        "print(big.where(fits).checksum(), big.where('$A * $B <= 4096').checksum())"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    printed = [
        subprocess.run(
            [sys.executable, *flags, "-c", code, str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.split()
        for flags in ([], ["-OO"])
    ]
    assert printed[0] == printed[1] and len(printed[0]) == 2, printed


# ---------------------------------------------------------------------------------------------- lazy filters
def test_partial_callable_object_and_set_closure_filters_give_one_checksum_in_every_process():
    code = (
        "import functools\n"
        "from autotune.space import CartesianSpace\n"
        "def fits(c, smem):\n    return c.A * c.B <= smem\n"
        "class Fits:\n    def __init__(self, smem):\n        self.smem = smem\n"
        "    def __call__(self, c):\n        return c.A * c.B <= self.smem\n"
        "def make():\n    allowed = {'row', 'col', 'tile', 'split', 'stream', 'persistent'}\n"
        "    return lambda c: c.MODE in allowed\n"
        "big = lambda: CartesianSpace(A=range(1000), B=range(1000), MODE=('row', 'col'))\n"
        "print(big().where(functools.partial(fits, smem=4096)).checksum(), big().where(Fits(4096)).checksum(),\n"
        "      big().where(make()).checksum())"
    )
    outs = printed_under_hash_seeds(code, ("1", "2", "3"))
    assert len(set(outs)) == 1, outs
    changed = printed_under_hash_seeds(code.replace("4096", "8192").replace("'stream'", "'other'"), ("1",))[0]
    assert all(a != b for a, b in zip(outs[0].split(), changed.split()))


def test_a_partial_or_callable_object_s_arguments_are_in_the_checksum():
    assert (
        big().where(functools.partial(fits, smem=10)).checksum()
        != big().where(functools.partial(fits, smem=10**6)).checksum()
    )
    assert big().where(Fits(10)).checksum() != big().where(Fits(10**6)).checksum()
    assert big().where(Fits(10)).checksum() == big().where(Fits(10)).checksum()


def test_a_lazy_filter_s_checksum_follows_the_module_globals_it_reads():
    code = (
        "from autotune.space import CartesianSpace\n"
        "LIMIT = 10\n"
        "print(CartesianSpace(A=range(1000), B=range(1000)).where(lambda c: c.A < LIMIT).checksum())"
    )
    ten = printed_under_hash_seeds(code, ("1", "2"))
    assert ten[0] == ten[1]
    assert printed_under_hash_seeds(code.replace("LIMIT = 10", "LIMIT = 999"), ("1",))[0] != ten[0]


def test_a_lazy_filter_s_checksum_follows_constants_read_through_a_module_a_class_or_a_dict():
    """A filter reading `settings.LIMIT`, `Limits.HIGH` or a table (dict) global: loosening one of them is a new
    space (the old winner would pass `contains` and the new configs never be tried)."""
    code = (
        "import types\n"
        "from autotune.space import CartesianSpace\n"
        "settings = types.ModuleType('settings'); settings.LIMIT = 64\n"
        "class Limits:\n    HIGH = 8\n"
        "ALLOWED = {1: True, 2: False}\n"
        "def keep(c):\n    return c['A'] != settings.LIMIT and c['B'] < Limits.HIGH and ALLOWED.get(c['C'], True)\n"
        "print(CartesianSpace(A=range(100), B=range(100), C=range(100)).where(keep).checksum())"
    )
    base = printed_under_hash_seeds(code, ("1", "2"))
    assert base[0] == base[1]
    for change in ("settings.LIMIT = 256", "HIGH = 9", "ALLOWED = {1: True, 2: True}"):
        was = {"settings.LIMIT = 256": "settings.LIMIT = 64", "HIGH = 9": "HIGH = 8"}.get(
            change, "ALLOWED = {1: True, 2: False}"
        )
        assert printed_under_hash_seeds(code.replace(was, change), ("1",))[0] != base[0], change


def test_a_filter_with_no_stable_text_is_refused_at_where_on_a_lazy_space_only():
    class Opaque:
        pass

    odd = functools.partial(lambda c, o: True, o=Opaque())
    with pytest.raises(SpaceError, match=r"argument o = .*Opaque.*\$X expression string.*module-level function"):
        big().where(odd)
    with pytest.raises(SpaceError, match="no Python code"):
        big().where(callable)
    assert len(CartesianSpace(A=(1, 2)).where(odd)) == 2  # an eager space's checksum lists its configs


def test_a_filter_that_captures_a_value_with_no_stable_text_is_refused_too():
    # SpaceError is a ValueError: it was taken for the ValueError of an empty cell, so the capture counted as
    # "<empty>" and two filters closing over different objects shared one checksum (one cache entry)
    class Opaque:
        pass

    def closing_over(o: object):
        return lambda c: o is not None

    with pytest.raises(SpaceError, match=r"captured o = .*Opaque.*\$X expression string"):
        big().where(closing_over(Opaque()))
    assert big().where(closing_over(3)).checksum() != big().where(closing_over(4)).checksum()


# ---------------------------------------------------------------------------------------------- lazy unions
def test_a_lazy_union_s_checksum_covers_its_parts_filters_and_every_fixed_config():
    one = FixedSpace([{"A": 1, "B": 1}])
    assert (big().where(lambda c: c.A < 10) + one).checksum() != (big().where(lambda c: c.A > 990) + one).checksum()

    def fixed(k: int) -> FixedSpace:
        return FixedSpace([{"A": i, "B": 0} for i in range(3)] + [{"A": k, "B": 5}])

    assert (big() + fixed(7)).checksum() != (big() + fixed(2000)).checksum()
    assert (big() + fixed(7)).checksum() == (big() + fixed(7)).checksum()


# ---------------------------------------------------------------------------------------------- len
def test_len_of_a_lazy_filtered_space_or_union_raises_naming_unfiltered_len_and_list_still_works():
    s = CartesianSpace(A=range(400), B=range(251)).where("$A < 2")
    assert s.lazy
    with pytest.raises(SpaceError, match=r"unfiltered_len\(\) is 100,400"):
        len(s)
    with pytest.raises(SpaceError, match="not known without listing"):
        len(big() + FixedSpace([{"A": 1, "B": 1}]))
    assert len(big()) == 10**6  # unfiltered: the product, exact
    assert len(list(s)) == 502 and len(s.configs()) == 502


def test_len_of_an_eager_union_counts_a_config_in_both_parts_once():
    u = CartesianSpace(A=(1, 2)) + FixedSpace([{"A": 1}])
    assert len(u) == 2 == len(u.configs())


# ---------------------------------------------------------------------------------------------- space + list
def test_adding_a_list_with_a_bad_item_raises_the_space_error_naming_it():
    with pytest.raises(SpaceError, match="space item 1 is int 256"):
        CartesianSpace(BLOCK=(32, 64)) + [{"BLOCK": 128}, 256]
    with pytest.raises(SpaceError, match="space item 0 is int"):
        [7] + CartesianSpace(BLOCK=(32, 64))
    with pytest.raises(TypeError, match="unsupported operand"):
        CartesianSpace(BLOCK=(32, 64)) + 3


def _module(tmp_path, monkeypatch, name: str, text: str):
    """Import `text` as module `name` from a real file (so inspect can read its source)."""
    import importlib

    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def test_wrapped_filters_are_identified_by_their_own_code_not_the_function_they_wrap(tmp_path, monkeypatch):
    """functools.wraps sets __wrapped__, which inspect.getsource follows: a filter and its negation, both wrapping
    one function, would read as that function's source and share cache entries."""
    mod = _module(
        tmp_path,
        monkeypatch,
        "wrapping_filters",
        (
            "import functools\n"
            "def fits(c):\n    return c.A * c.B <= 4096\n"
            "def keep(f):\n    @functools.wraps(f)\n    def w(c):\n        return f(c)\n    return w\n"
            "def negate(f):\n    @functools.wraps(f)\n    def w(c):\n        return not f(c)\n    return w\n"
        ),
    )
    kept, negated = big().where(mod.keep(mod.fits)), big().where(mod.negate(mod.fits))
    assert kept.contains(Config(A=1, B=1)) and not negated.contains(Config(A=1, B=1))
    assert kept.checksum() != negated.checksum()


def test_two_lambdas_on_one_line_differ_even_when_renamed():
    lo, hi = (lambda c: c.A < 500), (lambda c: c.A >= 500)
    lo.__name__, hi.__name__ = "lo", "hi"  # a lambda's source is its whole line, shared by both
    assert big().where(lo).checksum() != big().where(hi).checksum()


def test_a_filter_whose_file_changed_since_import_is_identified_by_the_code_that_runs(tmp_path, monkeypatch):
    """A rolling deploy: the file on disk is already the new filter, this process still runs the old one. Its
    checksum must not be the new filter's (the new processes would reuse winners of the old, narrower filter), and a
    file caught half-written (a tokenize error) must not break `.where()`."""
    import linecache

    mod = _module(tmp_path, monkeypatch, "edited_filter", "def fits(c):\n    return c.A * c.B <= 4096\n")
    before = big().where(mod.fits).checksum()
    (tmp_path / "edited_filter.py").write_text("def fits(c):\n    return c.A * c.B <= 65536\n")
    linecache.checkcache()
    new_process = printed_under_hash_seeds(
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\nfrom edited_filter import fits\n"
        "from autotune.space import CartesianSpace\n"
        "print(CartesianSpace(A=range(1000), B=range(1000)).where(fits).checksum())",
        ("1",),
    )[0]
    running = big().where(mod.fits)
    assert not running.contains(Config(A=100, B=100))  # still the old filter
    assert running.checksum() != new_process
    assert before != new_process
    (tmp_path / "edited_filter.py").write_text("TABLE = (1,\n    '''\n")  # an editor's save in progress
    linecache.checkcache()
    assert big().where(mod.fits).checksum()  # no tokenize.TokenError out of .where()


class _Small:
    def __call__(self, c: Config) -> bool:
        return self.ok(c)

    def ok(self, c: Config) -> bool:
        return c.A < 10


class _Large:
    def __call__(self, c: Config) -> bool:
        return self.ok(c)

    def ok(self, c: Config) -> bool:
        return c.A >= 10


def test_callable_objects_alike_in_call_but_not_in_the_methods_it_calls_are_two_filters():
    assert big().where(_Small()).checksum() != big().where(_Large()).checksum()
    assert big().where(_Small()).checksum() == big().where(_Small()).checksum()


def test_a_lazy_spaces_compile_options_are_checked_in_every_part_and_a_filter_may_keep_knobs_apart():
    """Decoration checks a lazy space as a listed one is checked: a bad num_warps in a union's small part (never in
    the one sampled config) is refused, and occupancy beside maxnreg is accepted where a filter keeps them apart."""
    from autotune.kernel.compile_options import compile_option_names
    from autotune.space.checks import validate_space

    def validate(space) -> None:
        validate_space(
            space,
            kernel_name="k",
            constexpr_names=["A", "B"],
            compile_options=compile_option_names(),
            static_options={},
        )

    union = CartesianSpace(A=range(1000), B=range(200), num_warps=(4,)) + CartesianSpace(A=(1, 2), num_warps=(3,))
    assert union.lazy
    with pytest.raises(SpaceError, match="has num_warps=3: num_warps must be a power of two"):
        validate(union)
    apart = CartesianSpace(A=range(1000), B=range(200), occupancy=(None, 2), maxnreg=(None, 128))
    validate(apart.where("$occupancy is None or $maxnreg is None"))  # no config sets both
    with pytest.raises(SpaceError, match="sets both occupancy and maxnreg"):
        validate(apart)  # unfiltered: the axes make a config with both
