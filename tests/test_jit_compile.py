"""The GPU compile path, on a CPU: Triton's JIT compiles real sm_90 cubins in our pool via AsyncCompileMode."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(__file__)


def run_script(case: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = os.path.join(os.environ["AUTOTUNE_CACHE_DIR"], "triton")
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = os.path.dirname(HERE)  # this checkout's autotune, whatever is installed
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "jit_compile_script.py"), case],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_jit_path_compiles_in_the_pool_and_the_winner_launch_compiles_nothing():
    out = run_script("pool")
    statuses = {json.dumps(cfg, sort_keys=True): status for cfg, status, _, _ in out["results"]}
    # BLOCK=48 is not a power of two: a real compile error, recorded, not fatal.
    assert statuses.pop(json.dumps({"BLOCK": 48, "num_warps": 4}, sort_keys=True)) == "compile_error"
    assert set(statuses.values()) == {"ok"} and len(statuses) == 4
    assert all(kind == "CompiledKernel" for _, status, kind, _ in out["results"] if status == "ok")
    # Every compile ran on a pool thread, not on the calling thread.
    assert out["compile_threads"] and all(t.startswith("autotune-compile") for t in out["compile_threads"])
    # The later warm-up of a tuned config hits the JIT's kernel cache: no compile.
    assert out["compiles_after"] == out["compiles_in_pipeline"]
    assert out["again_type"] == "CompiledKernel"
    assert out["cached_kernels"] == 4
    # The failed compile left no placeholder behind (Triton 3.6 to 3.8 keep its FutureKernel; 3.9 drops it).
    assert out["cached_kinds"] == ["CompiledKernel"]


def test_a_compile_past_its_timeout_is_not_waited_for():
    """Triton's AsyncCompileMode waits for every compile it started when the session closes; the timed-out one
    is dropped from it, so compile_timeout_s bounds the tuning (the hung compile waits a minute)."""
    out = run_script("timeout")
    assert out == {"statuses": ["ok", "timeout"], "hung_still_waiting": True}


def test_ctrl_c_while_the_session_closes_leaves_the_thread_able_to_tune_again():
    """With Triton 3.6's AsyncCompileMode.__exit__ (the mode cleared only after waiting for the compiles), a
    Ctrl-C during that wait must not leave the thread's mode set: the next tuning compiles normally."""
    out = run_script("interrupt")
    assert out == {"interrupted": True, "mode_left_active": False, "next_tuning": ["ok"]}


def test_a_tuning_inside_another_tunings_session_keeps_its_own_pool_and_timeout():
    """A setup=/verify= that tunes a kernel opens a session inside a session: the outer mode steps aside (Triton
    allows one per thread), the inner tuning's hung compile times out without holding up the outer session, and
    the outer mode is back and compiling afterwards."""
    out = run_script("nested")
    assert out["inner"] == ["ok", "timeout"] and out["outer"] == ["ok", "ok"]
    assert out["outer_restored"] and not out["mode_after"]
    assert out["hung_still_waiting"]  # the hung compile waits a minute, or until the script lets it go


WARM_KEY = """
import multiprocessing
import triton, triton.language as tl
from triton.runtime.cache import triton_key
import autotune
from autotune.engine import compilers

assert triton_key.cache_info().currsize == 0

@autotune.autotune(space={"BLOCK": [16]}, key=["n"])
@triton.jit
def first(x, n, BLOCK: tl.constexpr):
    pass

thread = compilers._triton_key_thread
assert thread is not None and thread.name == "autotune-triton-key", thread

@triton.jit
def second(x, n, BLOCK: tl.constexpr):
    pass

autotune.autotune(space={"BLOCK": [16]}, key=["n"])(second)
assert compilers._triton_key_thread is thread  # once per process
thread.join(120)
assert triton_key.cache_info().currsize == 1  # Triton's own memo: the first compile finds it computed

def decorate_in_a_child(queue):
    triton_key.cache_clear()  # as in a child whose parent had not hashed yet
    autotune.autotune(space={"BLOCK": [32]}, key=["n"])(second)
    queue.put(compilers._triton_key_thread is None)  # a pool's or a DataLoader's worker may never compile

if __name__ == "__main__":
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=decorate_in_a_child, args=(queue,))
    child.start()
    assert queue.get(timeout=120) is True
    child.join()
    print("ok")
"""


def test_decorating_a_jit_kernel_starts_tritons_compiler_hash_in_the_background_once_per_process(tmp_path):
    script = tmp_path / "warm_key.py"  # a file: @triton.jit reads the kernel's source from it
    script.write_text(WARM_KEY)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.path.dirname(HERE)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
