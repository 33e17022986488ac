"""Hostile cache contents found by issue 40 (items 13, 14, 18): links out of the cache, future timestamps."""

from __future__ import annotations

import os

import pytest
from test_cache import DT, Tuner, new_cache, path_of

from autotune import CacheWarning
from autotune.space import Config


@pytest.mark.parametrize("dangling", [True, False])
def test_a_kernel_directory_linked_out_of_the_cache_is_named_and_never_written_through(tmp_path, dangling):
    outside = tmp_path / "elsewhere"
    if not dangling:
        outside.mkdir()
    kernel_dir = path_of((1,)).parent
    kernel_dir.parent.mkdir(parents=True)
    kernel_dir.symlink_to(outside, target_is_directory=True)
    with pytest.warns(CacheWarning) as caught:
        rec, how = new_cache().get_or_tune((1,), DT, Tuner((1,)))
    assert how == "tuned" and rec.winner == Config(BLOCK=64)
    messages = [str(w.message) for w in caught]
    assert any(f"{kernel_dir} is a symbolic link (to {outside})" in m for m in messages), messages
    assert not any("FileExistsError" in m for m in messages), messages
    assert not outside.exists() or os.listdir(outside) == []  # nothing locked or written outside the cache
