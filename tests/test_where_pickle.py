"""A space filtered by `where("$X")` strings pickles, so a kernel autotuned away from its definition (a factory such
as kernels.vector_add.make_add, whose SPACE has `$X` filters) is decorated anew in a worker instead of being tuned in
the caller's process with an IsolationWarning about a local object that cannot be pickled."""

from __future__ import annotations

import os
import pickle
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from autotune import CartesianSpace, FixedSpace  # noqa: E402
from autotune.engine.isolation.runner import _how_to_load  # noqa: E402
from kernels import vector_add as add_mod  # noqa: E402

V = (16, 32, 64, 128, 256, 512, 1024)


def test_listed_and_lazy_spaces_filtered_by_strings_pickle_unchanged():
    listed = CartesianSpace(A=V, B=V).where("$A * $B <= 4096").where("$A >= 32")
    lazy = CartesianSpace(A=V, B=V, C=V, D=tuple(range(1, 17)), E=tuple(range(1, 21))).where("$A * $B <= 16384")
    fixed = FixedSpace([{"A": 1}, {"A": 2}]).where("$A > 1") + listed
    assert lazy.lazy and not listed.lazy
    for space in (listed, lazy, fixed):
        back = pickle.loads(pickle.dumps(space))
        assert back.checksum() == space.checksum()
    assert list(pickle.loads(pickle.dumps(listed))) == list(listed)
    back = pickle.loads(pickle.dumps(lazy))
    assert back.contains({"A": 64, "B": 256, "C": 16, "D": 1, "E": 1})
    assert not back.contains({"A": 1024, "B": 1024, "C": 16, "D": 1, "E": 1})


def test_factory_kernel_with_string_filters_can_be_sent_to_a_worker():
    kernel = add_mod.make_add(add_mod.SPACE)  # SPACE: two where("$X") filters; decorated away from its def
    recipe, reason = _how_to_load(kernel)
    assert reason is None
    assert recipe is not None
    again = pickle.loads(recipe)["space"]
    assert list(again) == list(add_mod.SPACE)
