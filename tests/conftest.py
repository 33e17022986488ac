"""Test configuration: run Triton through its CPU interpreter unless a CUDA GPU is present."""

from __future__ import annotations

import os


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


if not _has_cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

ON_GPU = os.environ.get("TRITON_INTERPRET", "0") != "1" and _has_cuda()


def pytest_collection_modifyitems(config, items):
    if ON_GPU:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (TRITON_INTERPRET=1 run)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _isolated_cache_dir(tmp_path, monkeypatch):
    """Every test gets its own cache directory and no AUTOTUNE_* mode switches from the outside."""
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "autotune-cache"))
    for name in [n for n in os.environ if n.startswith("AUTOTUNE_") and n != "AUTOTUNE_CACHE_DIR"]:
        monkeypatch.delenv(name)  # AUTOTUNE_MODE=online, AUTOTUNE_ISOLATE, AUTOTUNE_FORCE ... in the shell
    from autotune.storage.remote_config import clear_remote_settings

    clear_remote_settings()
    import gc

    from autotune.storage import reset_stats

    gc.collect()  # caches of earlier tests held in reference cycles would still count in clear_autotune_cache()
    reset_stats()
    yield


@pytest.fixture
def redis_server(tmp_path):
    """A real redis-server on a free loopback port, stopped after the test (skips where none is installed)."""
    from redis_process import RedisProcess, redis_server_path

    if redis_server_path() is None:
        pytest.skip(
            "redis-server is not installed (Debian: apt-get install redis-server); the Redis tier needs a real one"
        )
    server = RedisProcess(tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray runtime (2 CPUs) for a test module's Ray sweeps, shut down after the module."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
