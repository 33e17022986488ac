"""The Ray executor: one actor per GPU of the cluster (or per requested slot on the CPU), each a `SweepWorker`.

Ray is imported only here, when a sweep asks for it (`pip install -e ".[ray]"`). The Ray runtime the caller
started with `ray.init` is used as it is; otherwise this connects to `address` (or RAY_ADDRESS; a fresh local
runtime when neither is given) and disconnects at the end. An actor that dies (killed, its node lost) raises
`WorkerLost` in the driver, which replaces it with a new actor wherever Ray places it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import OptionError
from .slots import JobFailed, Slot, WorkerLost, env_of_worker, start_together
from .worker import KeyInfo, Maker, MakerSet, Share, SweepWorker, WorkerSpec

__all__ = ["RayExecutor", "RayWorker"]

_START_TIMEOUT_S = 300.0  # placing an actor and importing torch, Triton and the kernel's module in it


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise OptionError(
            f"sweep(executor='ray') needs Ray, which is not installed ({exc}): pip install -e '.[ray]' "
            "(or pip install 'ray>=2.9'), or use executor='local'"
        ) from None
    return ray


class SweepActor:
    """The actor class (made a Ray actor by `RayWorker`): a SweepWorker answering the driver's requests."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.worker = SweepWorker(spec)

    def fingerprint(self) -> str:
        return self.worker.fingerprint()

    def prepare(self, maker: Maker | MakerSet) -> KeyInfo:
        return self.worker.prepare(maker)

    def tune(self) -> bytes:
        return self.worker.tune()

    def tune_share(self, share: Share) -> bytes:
        return self.worker.tune_share(share)


class RayExecutor:
    """`workers` actors (default: one per GPU in the cluster, else 1), each asking Ray for one GPU when the cluster
    has any, else one CPU; actor i gets `worker_env[i % len]` in its environment (a runtime_env)."""

    name = "ray"

    def __init__(
        self,
        spec: WorkerSpec,
        workers: int | None,
        worker_env: Sequence[Mapping[str, str]] = (),
        address: str | None = None,
    ) -> None:
        self.ray = _ray()
        self.spec, self.worker_env, self.address = spec, list(worker_env), address
        self.requested = workers
        self.slots: list[RayWorker] = []
        self.connected_here = False

    def start(self) -> list[Slot]:
        ray = self.ray
        if not ray.is_initialized():
            ray.init(address=self.address, log_to_driver=False)
            self.connected_here = True
        gpus = int(ray.cluster_resources().get("GPU", 0))
        count = self.requested or max(1, gpus)
        for i in range(count):
            self.slots.append(RayWorker(ray, i, self.spec, env_of_worker(self.worker_env, i), gpus > 0))
        start_together(self.slots)
        return list(self.slots)

    def stop(self) -> None:
        for slot in self.slots:
            slot.stop()
        if self.connected_here:
            self.ray.shutdown()


class RayWorker:
    """The driver's handle on one actor (`Slot`)."""

    def __init__(self, ray: Any, index: int, spec: WorkerSpec, env: dict[str, str], gpu: bool) -> None:
        self.ray, self.index, self.spec, self.env, self.gpu = ray, index, spec, env, gpu
        self.kind = ""
        self.actor: Any = None
        self._ready: Any = None

    def launch(self) -> None:
        options: dict[str, Any] = {"num_gpus": 1} if self.gpu else {"num_cpus": 1}
        if self.env:
            options["runtime_env"] = {"env_vars": self.env}
        actor_class = self.ray.remote(max_restarts=0, max_task_retries=0)(SweepActor)
        self.actor = actor_class.options(**options).remote(self.spec)
        self._ready = self.actor.fingerprint.remote()

    def wait_ready(self) -> None:
        try:
            self.kind = self._get(self._ready, timeout_s=_START_TIMEOUT_S)
        except self.ray.exceptions.GetTimeoutError:
            self.stop()
            resources = self.ray.available_resources()
            raise WorkerLost(
                f"sweep actor {self.index} was not placed within {_START_TIMEOUT_S:g} s: the cluster has "
                f"{resources.get('GPU', 0):g} GPUs and {resources.get('CPU', 0):g} CPUs free; ask for fewer workers"
            ) from None

    def restart(self) -> None:
        self.stop()
        self.launch()
        self.wait_ready()

    def prepare(self, maker: Maker | MakerSet) -> KeyInfo:
        return self._get(self._running().prepare.remote(maker))

    def tune(self) -> bytes:
        return self._get(self._running().tune.remote())

    def tune_share(self, share: Share) -> bytes:
        return self._get(self._running().tune_share.remote(share))

    def _running(self) -> Any:
        actor = self.actor  # `stop` (Ctrl-C, from the main thread) clears it under a slot's thread
        if actor is None:
            raise WorkerLost(f"sweep actor {self.index} is stopped")
        return actor

    def stop(self) -> None:
        if self.actor is not None:
            try:
                self.ray.kill(self.actor, no_restart=True)
            except Exception:  # already gone with its node
                pass
        self.actor = None

    def _get(self, ref: Any, timeout_s: float | None = None) -> Any:
        exceptions = self.ray.exceptions
        try:
            return self.ray.get(ref, timeout=timeout_s)
        except exceptions.RayTaskError as exc:  # raised by the worker's own code: the job's failure
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            raise JobFailed(f"{type(cause).__name__}: {cause}") from None
        except (
            exceptions.RayActorError,
            exceptions.WorkerCrashedError,
            exceptions.NodeDiedError,
            exceptions.RaySystemError,  # Ray shut down under the call (the sweep is ending)
        ) as exc:
            raise WorkerLost(f"sweep actor {self.index} ({self.kind or 'starting'}) was lost: {exc}") from None
