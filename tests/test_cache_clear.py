"""`clear_autotune_cache` with the kernel objects users hold (a compat kernel, one under `triton.heuristics`, the
@triton.jit kernel given to `autotune_launch`), key values that are normalised when stored (a `tl.dtype`, an
enum), and `remote=True` with no remote cache configured. Real kernels in the interpreter, real cache files."""

from __future__ import annotations

import enum
import warnings

import pytest
import torch
import triton
import triton.language as tl

from autotune import CallError, OptionError, Tuning, autotune, autotune_launch, clear_autotune_cache, compat
from autotune.storage import disk_entries

FAST = Tuning(preset="fast", warmup=0, reps=1, refine_topk=0, compile_workers=0, isolate="off")
GRID = "(cdiv(n, $BLOCK),)"


@autotune(space={"BLOCK": (16, 32)}, key=["n"], grid=GRID, tuning=FAST)
@triton.jit
def add_one(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


class Compat:
    """A compat kernel with the same short name as the native `add_one` above (another qualified name)."""

    @compat.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"], tuning=FAST)
    @triton.jit
    def add_one(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


@triton.heuristics({"EVEN": lambda a: a["n"] % 16 == 0})
@autotune(space={"BLOCK": (16, 32)}, key=["n"], grid=GRID, tuning=FAST)
@triton.jit
def h_native(x, out, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


@triton.heuristics({"EVEN": lambda a: a["n"] % 16 == 0})
@compat.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"], tuning=FAST)
@triton.jit
def h_compat(x, out, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


@triton.jit
def plain(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


@triton.jit
def plain_too(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


class Mode(enum.Enum):
    FAST = "fast"


class Level(enum.IntEnum):
    HIGH = 3


KEY_NOW = [None]


@autotune(space={"BLOCK": (16, 32)}, key=lambda **a: KEY_NOW[0], grid=GRID, tuning=FAST)
@triton.jit
def keyed(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


@pytest.fixture(autouse=True)
def _empty_memory():
    """The kernels above live for the whole module: each test starts with their memory empty (and its own disk).
    A clear keeps the entries a test put in a compat kernel's `cache` dict itself (the user's own, by design): they
    are dropped here too, or a test that counts that dict would depend on which tests ran before it."""
    clear_autotune_cache()
    Compat.add_one.cache.clear()
    h_compat.fn.cache.clear()


def _args(n=40):
    return torch.zeros(n), torch.empty(n), n


def _grid(meta):
    return (triton.cdiv(40, meta["BLOCK"]),)


def _kernel_ids():
    return sorted(e.record.kernel_id for e in disk_entries())


def test_a_compat_kernel_object_clears_itself_alone_and_its_cache_dict_follows():
    add_one(*_args())
    Compat.add_one[_grid](*_args())
    Compat.add_one[_grid](*_args(64))
    native_id, compat_id = add_one.identity, Compat.add_one.tuner.identity
    assert _kernel_ids() == sorted([native_id, compat_id, compat_id])
    assert len(Compat.add_one.cache) == 2
    mine = triton.Config({"BLOCK": 16})
    Compat.add_one.cache[(999, "torch.float32", "torch.float32")] = mine  # the user's own entry
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "cleared 2 kernels of that name"
        assert clear_autotune_cache(kernel=Compat.add_one, key=(40,)) == 1
    assert _kernel_ids() == sorted([native_id, compat_id])
    assert list(Compat.add_one.cache) == [
        (64, "torch.float32", "torch.float32"),
        (999, "torch.float32", "torch.float32"),
    ]
    assert clear_autotune_cache(kernel=Compat.add_one) == 1
    assert _kernel_ids() == [native_id]  # the native kernel of the same name keeps its entry
    assert len(add_one.cache.memory) == 1
    assert Compat.add_one.cache == {(999, "torch.float32", "torch.float32"): mine}
    Compat.add_one[_grid](*_args())  # cleared: tuned again, and filed again
    assert (40, "torch.float32", "torch.float32") in Compat.add_one.cache


@pytest.mark.parametrize("how", ["by name", "everything"])
def test_a_compat_cache_dict_follows_a_clear_by_name_or_of_everything(how):
    Compat.add_one[_grid](*_args())
    Compat.add_one[_grid](*_args(64))
    mine = triton.Config({"BLOCK": 16})
    Compat.add_one.cache[(999, "torch.float32", "torch.float32")] = mine  # the user's own entry
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # by name: two kernels are called add_one
        removed = clear_autotune_cache(kernel="add_one", key=(40,)) if how == "by name" else clear_autotune_cache()
    assert removed == 1 if how == "by name" else removed == 2
    left = [(64, "torch.float32", "torch.float32")] if how == "by name" else []
    assert set(Compat.add_one.cache) == {*left, (999, "torch.float32", "torch.float32")}
    assert Compat.add_one.cache[(999, "torch.float32", "torch.float32")] is mine
    Compat.add_one[_grid](*_args())  # cleared: tuned again (not launched from a stale entry)
    assert Compat.add_one.tuner.record((40,)).trials  # a fresh tuning record, with its trials
    assert (40, "torch.float32", "torch.float32") in Compat.add_one.cache


@pytest.mark.parametrize("which", ["native", "compat"])
def test_a_kernel_under_triton_heuristics_is_cleared(which):
    kernel = h_native if which == "native" else h_compat
    kernel[_grid](*_args())
    assert len(disk_entries()) == 1
    assert clear_autotune_cache(kernel=kernel) == 1
    assert disk_entries() == []
    if which == "compat":
        assert kernel.fn.cache == {}


def test_the_jit_kernel_given_to_autotune_launch_clears_its_entries_only():
    x, out, n = _args()
    for space in ({"BLOCK": (16, 32)}, {"BLOCK": (16, 64)}):
        autotune_launch(plain, space=space, args=(x, out, n), key=["n"], grid=GRID, tuning=FAST)
    autotune_launch(plain_too, space={"BLOCK": (16, 32)}, args=(x, out, n), key=["n"], grid=GRID, tuning=FAST)
    assert len(disk_entries()) == 3  # one entry per space of `plain`, one of `plain_too`
    assert clear_autotune_cache(kernel=plain) == 2
    assert [e.record.kernel for e in disk_entries()] == ["plain_too"]
    result = autotune_launch(plain, space={"BLOCK": (16, 32)}, args=(x, out, n), key=["n"], grid=GRID, tuning=FAST)
    assert not result.cache_hit  # its memory was cleared too


def test_a_non_kernel_is_refused_naming_what_is_accepted():
    with pytest.raises(CallError, match="autotune_launch, or a kernel name"):
        clear_autotune_cache(kernel=object())


@pytest.mark.parametrize(
    "value",
    [tl.float32, Mode.FAST, Level.HIGH, torch.float16, 7],
    ids=["tl.dtype", "Enum", "IntEnum", "torch.dtype", "int"],
)
def test_a_key_is_matched_as_the_call_stored_it(value):
    KEY_NOW[0] = value
    keyed(*_args())
    KEY_NOW[0] = "other"
    keyed(*_args())
    assert clear_autotune_cache(kernel=keyed, key=(value,)) == 1  # memory and disk: one entry
    assert [e.record.key for e in disk_entries()] == [["other"]]
    KEY_NOW[0] = value
    keyed(*_args())
    assert clear_autotune_cache(kernel="keyed", key=value) == 1  # by name, a bare value: the same
    assert len(keyed.cache.memory) == 1


def test_a_key_that_reads_like_a_cached_one_but_holds_other_types_warns_naming_the_cached_key():
    """key="40" for a key=["n"] kernel tuned at n=40 cleared nothing and said nothing; a key never tuned stays quiet."""
    add_one(*_args())
    with pytest.warns(
        UserWarning,
        match=r"clear_autotune_cache\(key=\('40',\)\) matched no entry of add_one.*its "
        r"cached key \(40,\) reads the same with other types.*key=\(40,\)",
    ):
        assert clear_autotune_cache(kernel=add_one, key="40") == 0
    with pytest.warns(UserWarning, match=r"key=\(40\.0,\)\) matched no entry.*cached key \(40,\) reads the same"):
        assert clear_autotune_cache(kernel=add_one, key=40.0) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert clear_autotune_cache(kernel=add_one, key=41) == 0  # never tuned: not a mistake
    assert clear_autotune_cache(kernel=add_one, key=40) == 1


def test_a_key_of_another_length_given_with_the_kernel_s_name_warns_how_many_values_its_keys_have():
    add_one(*_args())  # key=["n"]: one value
    with pytest.warns(UserWarning, match=r"matched no entry.*the keys of add_one have 1 values, this one 2"):
        assert clear_autotune_cache(kernel="add_one", key=(40, 41)) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert clear_autotune_cache(kernel="add_one", key=41) == 0  # one value, never tuned: not a mistake
    assert clear_autotune_cache(kernel="add_one", key=40) == 1


def test_a_key_that_cannot_be_a_key_is_an_error_before_anything_is_cleared():
    add_one(*_args())
    with pytest.raises(ValueError, match="tensor"):
        clear_autotune_cache(kernel=add_one, key=(torch.zeros(3),))
    assert len(disk_entries()) == 1


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"kernel": "add_one"}, {"kernel": "add_one", "key": 40}, {"kernel": add_one}],
    ids=["all", "by name", "one key", "object"],
)
def test_remote_true_without_a_remote_cache_is_an_error_and_clears_nothing(kwargs):
    add_one(*_args())
    with pytest.raises(OptionError, match="no remote cache: set AUTOTUNE_REMOTE_CACHE=.*nothing was cleared"):
        clear_autotune_cache(**kwargs, remote=True)
    assert len(disk_entries()) == 1 and len(add_one.cache.memory) == 1


@autotune(space={"BLOCK": (16, 32)}, key=None, grid=GRID, tuning=FAST)
@triton.jit
def one_entry(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


@pytest.mark.parametrize(
    "kernel, key, message",
    [
        (add_one, (40, 1), r"2 values, but add_one's key=\['n'\] has 1"),
        (add_one, (), r"0 values, but add_one's key=\['n'\] has 1"),
        (Compat.add_one, (40, "x"), r"2 values, but add_one's key=\['n'\] has 1"),
        (one_entry, (40,), r"decorated with key=None, one entry for every call; pass key=\(\)"),
    ],
    ids=["native, too many", "native, none", "compat", "key=None"],
)
def test_a_key_of_the_wrong_length_for_the_kernel_object_is_an_error_that_clears_nothing(kernel, key, message):
    """A key with another number of values than the kernel's keys cannot match any entry: said, not a silent 0."""
    launch = kernel if kernel is not Compat.add_one else kernel[_grid]
    launch(*_args())
    with pytest.raises(CallError, match=message):
        clear_autotune_cache(kernel=kernel, key=key)
    assert len(disk_entries()) == 1
    right = () if kernel is one_entry else (40,)
    assert clear_autotune_cache(kernel=kernel, key=right) == 1  # the right length clears it


def test_a_misspelt_kernel_name_warns_naming_the_close_one_and_an_unknown_name_is_quiet():
    """A typo of a kernel this process or the disk knows is the likely mistake behind a clear of nothing; a name
    nothing is close to (a clear before anything was tuned) stays quiet."""
    add_one(*_args())
    with pytest.warns(UserWarning, match=r"kernel='add_on'\) matched no kernel .* Did you mean 'add_one'\?"):
        assert clear_autotune_cache(kernel="add_on") == 0
    assert len(disk_entries()) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert clear_autotune_cache(kernel="something_else_entirely") == 0
        assert clear_autotune_cache(kernel="add_one", key=(12345,)) == 0  # a known kernel, a key it lacks
        assert clear_autotune_cache(kernel="add_one") == 1
        assert clear_autotune_cache(kernel="add_one") == 0  # loaded here: not a typo
    autotune_launch(plain_too, space={"BLOCK": (16, 32)}, args=_args(), key=["n"], grid=GRID, tuning=FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert clear_autotune_cache(kernel=plain) == 0  # an object, close to plain_too's name: not a typo
