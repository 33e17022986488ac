"""A kernel's cache identity: its source, the @triton.jit helpers it calls and the values it reads from its module
and closure. Real kernels in real module files, imported as a restarted process would."""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import sys
import textwrap
from pathlib import Path

from hash_seeds import printed_under_hash_seeds

from autotune.kernel.source import kernel_source_text
from autotune.storage import source_hash

_counter = itertools.count()

HEADER = "import triton\nimport triton.language as tl\n"

VADD = """
@triton.jit
def vadd(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)
"""

WITH_HELPER = """
SCALE = {scale}
MASKED = tl.constexpr({masked})


@triton.jit
def inner(v):
    return v * {inner_factor}


@triton.jit
def scaled(v):
    return inner(v) * SCALE


@triton.jit
def kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        v = tl.load(x + offs, mask=offs < n)
    else:
        v = tl.load(x + offs)
    tl.store(out + offs, scaled(v), mask=offs < n)
"""


def load(tmp_path: Path, text: str, name: str = "kernel", top: str = "") -> object:
    """`name` from a fresh module file holding `text` (with `top` above the imports)."""
    path = tmp_path / f"ks{next(_counter)}.py"
    path.write_text(top + HEADER + textwrap.dedent(text))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def helper_module(tmp_path: Path, scale="2.0", masked="True", inner_factor="3", top: str = "") -> object:
    return load(tmp_path, WITH_HELPER.format(scale=scale, masked=masked, inner_factor=inner_factor), top=top)


def test_a_kernel_that_reads_nothing_outside_its_body_is_identified_by_its_source_alone(tmp_path):
    """So entries written before helpers and constants were part of the identity stay valid for such kernels."""
    kernel = load(tmp_path, VADD, "vadd")
    source = VADD[VADD.index("def vadd") :]
    assert kernel_source_text(kernel) == source
    assert source_hash(kernel) == hashlib.sha256(source.encode()).hexdigest()


def test_editing_a_helper_or_the_helper_of_a_helper_changes_the_identity(tmp_path):
    base = source_hash(helper_module(tmp_path))
    assert source_hash(helper_module(tmp_path)) == base
    assert source_hash(helper_module(tmp_path, inner_factor="4")) != base  # inner, called by scaled
    text = kernel_source_text(helper_module(tmp_path))
    assert "scaled -> " in text and "inner" not in text.split("# reads:")[1]  # inner counts inside scaled's hash


def test_the_values_of_module_globals_it_reads_are_part_of_the_identity(tmp_path):
    base = source_hash(helper_module(tmp_path))
    assert source_hash(helper_module(tmp_path, masked="False")) != base  # a constexpr switch in the kernel
    assert source_hash(helper_module(tmp_path, scale="1.0")) != base  # a constant a helper reads
    assert "MASKED = constexpr(True)" in kernel_source_text(helper_module(tmp_path))


def test_moving_the_kernel_in_its_file_keeps_the_identity(tmp_path):
    """Line numbers are not part of it (Triton's JIT cache key has them): a comment added at the top of the
    module must not retune every kernel in it."""
    assert source_hash(helper_module(tmp_path, top="# a comment\n\n\n")) == source_hash(helper_module(tmp_path))


def test_constants_reached_through_a_module_or_a_class_count(tmp_path):
    text = """
    class Tiles:
        K = {k}


    @triton.jit
    def kernel(x, n):
        tl.store(x + tl.arange(0, Tiles.K), tl.full((Tiles.K,), math.pi, tl.float32))
    """
    ident = [kernel_source_text(load(tmp_path, text.format(k=k), top="import math\n")) for k in (16, 32)]
    assert ident[0] != ident[1] and "Tiles.K = 16" in ident[0]
    assert "math" not in ident[0].split("# reads:")[1] and "tl." not in ident[0].split("# reads:")[1]


def test_closed_over_values_of_a_kernel_factory_are_part_of_the_identity(tmp_path):
    make = load(
        tmp_path,
        """
    def make(scale, block):
        @triton.jit
        def kernel(x):
            offs = tl.arange(0, block)
            tl.store(x + offs, tl.load(x + offs) * scale)
        return kernel
    """,
        "make",
    )
    assert source_hash(make(2.0, 16)) == source_hash(make(2.0, 16))
    assert len({source_hash(make(2.0, 16)), source_hash(make(3.0, 16)), source_hash(make(2.0, 32))}) == 3


def test_parameters_and_locals_that_shadow_a_global_are_not_dependencies(tmp_path):
    text = """
    n = 7
    v = 3.0
    BLOCK = 1024


    @triton.jit
    def kernel(x, n, BLOCK: tl.constexpr):
        v = tl.load(x + tl.arange(0, BLOCK))
        for i in range(2):
            v = v + i
        tl.store(x + tl.arange(0, BLOCK), v, mask=tl.arange(0, BLOCK) < n)
    """
    kernel = load(tmp_path, text)
    assert "# reads:" not in kernel_source_text(kernel)


def test_a_recursive_or_mutually_calling_helper_does_not_loop(tmp_path):
    text = """
    @triton.jit
    def ping(v, depth: tl.constexpr):
        if depth > 0:
            v = pong(v, depth - 1)
        return v


    @triton.jit
    def pong(v, depth: tl.constexpr):
        return ping(v, depth)


    @triton.jit
    def kernel(x):
        tl.store(x, ping(tl.load(x), 2))
    """
    assert "ping -> " in kernel_source_text(load(tmp_path, text))


def test_an_object_without_a_stable_text_is_named_by_its_type_so_the_identity_holds_across_processes(tmp_path):
    """A global whose repr shows an address, a set (ordered by PYTHONHASHSEED): the identity must not change with
    them, or every process would retune. JIT and interpreter must also agree (the same entry under both)."""
    path = tmp_path / "stable_mod.py"
    path.write_text(
        HEADER
        + textwrap.dedent("""
    import enum
    OBJ = object()
    NAMES = {"row", "col", "tiled", "strided", "blocked", "split"}
    class Layout(enum.Enum):
        ROW = 1
    LAYOUT = Layout.ROW
    @triton.jit
    def helper(v):
        return v + len(NAMES)
    @triton.jit
    def kernel(x):
        if LAYOUT == 1:
            tl.store(x, helper(tl.load(x)) + OBJ)
    """)
    )
    code = (
        f"import sys, hashlib; sys.path.insert(0, {str(tmp_path)!r}); import stable_mod;"
        "from autotune.kernel.source import kernel_source_text as t;"
        "print(hashlib.sha256(t(stable_mod.kernel).encode()).hexdigest())"
    )
    outs = printed_under_hash_seeds(code, ("1", "2", "3"), TRITON_INTERPRET="1")
    outs += printed_under_hash_seeds(code, ("4",), TRITON_INTERPRET="0")
    assert len(set(outs)) == 1


def test_a_kernel_made_by_exec_counts_the_globals_it_reads(tmp_path):
    import triton
    import triton.language as tl

    def generated(masked: bool):
        namespace = {"triton": triton, "tl": tl, "MASKED": tl.constexpr(masked)}
        text = (
            "def kernel(x, n, BLOCK: tl.constexpr):\n"
            "    offs = tl.arange(0, BLOCK)\n"
            "    if MASKED:\n        tl.store(x + offs, 1.0, mask=offs < n)\n"
            "    else:\n        tl.store(x + offs, 1.0)\n"
        )
        exec(compile(text, "<generated>", "exec"), namespace)
        return triton.jit(namespace["kernel"])

    assert kernel_source_text(generated(True)).startswith("bytecode:")
    assert source_hash(generated(True)) == source_hash(generated(True))
    assert source_hash(generated(True)) != source_hash(generated(False))


def test_a_helper_reached_through_a_module_of_the_user_s_is_followed(tmp_path, monkeypatch):
    """`kshelpers.scaled(v)`: a helper in another module of the user's, edited there and reloaded."""
    helpers_file = tmp_path / "kshelpers.py"
    helpers_file.write_text(HEADER + "@triton.jit\ndef scaled(v):\n    return v * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kshelpers", raising=False)
    kernel = load(
        tmp_path, "import kshelpers\n@triton.jit\ndef kernel(x):\n    tl.store(x, kshelpers.scaled(tl.load(x)))\n"
    )
    before = kernel_source_text(kernel)
    assert "kshelpers.scaled -> " in before
    helpers_file.write_text(HEADER + "@triton.jit\ndef scaled(v):\n    return v * 20\n")
    importlib.reload(sys.modules["kshelpers"])
    assert kernel_source_text(kernel) != before
    monkeypatch.delitem(sys.modules, "kshelpers")


def test_a_helper_defined_below_the_decorated_kernel_counts_and_redecorating_agrees(tmp_path):
    """The decorator runs before the rest of the module (a helper defined below the kernel is not a global yet):
    the identity is computed at its first use, so it holds the helper, and a kernel decorated again later (the
    next process's view) has the same identity. It was different, and the next process retuned."""
    kernel = load(
        tmp_path,
        """
    from autotune import autotune


    @autotune(space={"BLOCK": (16, 32)}, key=["n"], grid="(cdiv(n, $BLOCK),)")
    @triton.jit
    def kernel(x, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x + offs, twice(tl.load(x + offs, mask=offs < n)), mask=offs < n)


    @triton.jit
    def twice(v):
        return v * 2
    """,
    )
    assert "twice -> " in kernel_source_text(kernel)
    from autotune import autotune

    again = autotune(space={"BLOCK": (16, 32)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(kernel.fn)
    assert kernel.cache.source_hash == again.cache.source_hash == source_hash(kernel)


def test_each_helper_is_read_once_however_many_paths_reach_it(tmp_path, monkeypatch):
    """A helper library where each helper calls every earlier one has 2^n call paths: hashing must not walk them
    (18 levels took 6 s to 15 s before helpers were remembered within one computation)."""
    from autotune.kernel import source as kernel_source

    levels = 18
    text = "@triton.jit\ndef h0(v):\n    return v + 1\n"
    for i in range(1, levels):
        text += f"@triton.jit\ndef h{i}(v):\n    return " + " + ".join(f"h{j}(v)" for j in range(i)) + "\n"
    text += f"@triton.jit\ndef kernel(x):\n    tl.store(x, h{levels - 1}(tl.load(x)))\n"
    kernel = load(tmp_path, text)
    reads = []
    own_text = kernel_source._own_text
    monkeypatch.setattr(kernel_source, "_own_text", lambda k: reads.append(k) or own_text(k))
    first = kernel_source_text(kernel)
    assert len(reads) == levels + 1 and first == kernel_source_text(kernel)


AGGREGATE = """
import triton
import triton.language as tl


@tl.core._aggregate
class Acc:
    v: tl.tensor

    def __init__(self, v):
        self.v = v

    @triton.jit
    def scaled(self):
        return self.v * FACTOR


FACTOR = {factor}


@triton.jit
def kernel(x):
    tl.store(x, Acc(tl.load(x)).scaled())
"""


def test_an_aggregate_class_counts_by_its_source_and_what_its_methods_read_alike_in_jit_and_interpreter(tmp_path):
    """A `tl.core._aggregate` value is built from a local, so its methods are reached through the class: an edit
    of a method (or of a global it reads) changes the identity, the same under the JIT and the interpreter (whose
    aggregate classes list other methods)."""
    code = (
        f"import sys, hashlib; sys.path.insert(0, {str(tmp_path)!r}); import agg_mod;"
        "from autotune.kernel.source import kernel_source_text as t;"
        "print(hashlib.sha256(t(agg_mod.kernel).encode()).hexdigest())"
    )
    seen = []
    for text in (
        AGGREGATE.format(factor=2),
        AGGREGATE.format(factor=3),
        AGGREGATE.format(factor=2).replace("self.v * FACTOR", "FACTOR * self.v"),
    ):
        (tmp_path / "agg_mod.py").write_text(text)
        outs = printed_under_hash_seeds(code, ("1",), TRITON_INTERPRET="1")
        outs += printed_under_hash_seeds(code, ("2",), TRITON_INTERPRET="0")
        assert outs[0] == outs[1]
        seen.append(outs[0])
    assert len(set(seen)) == 3


def test_values_that_fight_inspection_or_have_no_plain_text(tmp_path):
    """A numpy scalar inside a constexpr counts by its value; a list that contains itself and a proxy whose every
    attribute raises do not break the identity (they count by their type)."""
    text = """
    import numpy as np


    class Proxy:
        @property
        def __class__(self):
            raise RuntimeError("working outside of context")

        def __getattr__(self, name):
            raise RuntimeError("working outside of context")


    EPS = tl.constexpr(np.float32({eps}))
    LOOP = [4]
    LOOP.append(LOOP)
    current = Proxy()


    @triton.jit
    def kernel(x):
        if current:
            tl.store(x, tl.load(x) + EPS + LOOP[0])
    """
    half, quarter = (kernel_source_text(load(tmp_path, text.format(eps=eps))) for eps in (0.5, 0.25))
    assert half != quarter and "EPS = constexpr(float32(0.5))" in half
    assert "LOOP : builtins.list" in half and "current : " in half


def test_an_exec_kernel_counts_attribute_chains_not_unrelated_globals_named_like_attributes():
    """Without source the references come from the bytecode: `Tiles.K` is a chain from a global; `store` in
    `tl.store` is an attribute, not the module's unrelated global `store`."""
    import triton
    import triton.language as tl

    def generated(k: int, store: str):
        namespace = {"triton": triton, "tl": tl, "Tiles": type("Tiles", (), {"K": k}), "store": store}
        text = "def kernel(x):\n    offs = tl.arange(0, Tiles.K)\n    tl.store(x + offs, tl.load(x + offs))\n"
        exec(compile(text, "<generated>", "exec"), namespace)
        return triton.jit(namespace["kernel"])

    assert source_hash(generated(16, "a")) != source_hash(generated(32, "a"))
    assert source_hash(generated(16, "a")) == source_hash(generated(16, "b"))


def test_a_helper_passed_around_as_a_constexpr_counts_by_its_code(tmp_path):
    """`ACT = tl.constexpr(relu)` then `ACT(v)` in the kernel: an edit of `relu` must change the identity (it counted
    by its wrapper's type, which also differed between the JIT and the interpreter)."""
    text = """
    @triton.jit
    def relu(v):
        return tl.maximum(v, {floor})


    ACT = tl.constexpr(relu)


    @triton.jit
    def kernel(x):
        tl.store(x, ACT(tl.load(x)))
    """
    zero, one = (kernel_source_text(load(tmp_path, text.format(floor=floor))) for floor in ("0.0", "1.0"))
    assert zero != one and "ACT -> " in zero
