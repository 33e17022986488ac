"""The Ray executor: one actor per GPU of the cluster (or per requested slot on the CPU), each a `SweepWorker`.

Ray is imported only here, when a sweep asks for it (`pip install "autotune[ray]"`). The Ray runtime the caller
started with `ray.init` is used as it is (an explicit address of another cluster is refused); otherwise this
connects to `address` (or RAY_ADDRESS; a fresh local runtime when neither is given), after checking that a HOST:PORT
head answers at all (Ray itself retries a dead address for minutes), and disconnects at the end. An actor that dies
(killed, its node lost) raises `WorkerLost` in the driver, which replaces it with a new actor wherever Ray places
it. Each actor removes its private cache directory as it is stopped. An actor that dies measuring a config in its
own process (isolate="off") is named with that config where the driver shares its host, and its replacement on
that host copies the dead actor's crash-journal notes into its own journal (recording that config `crashed`).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import AutotuneError, OptionError
from ..storage import journal
from .local import measuring_at_death, while_measuring
from .scratch import release_worker_dir, remove_abandoned_worker_dirs
from .slots import JobFailed, Slot, WorkerLost, env_of_worker, start_together
from .worker import KeyInfo, Maker, MakerSet, Share, SweepWorker, WorkerSpec

__all__ = ["RayExecutor", "RayWorker"]

_Home = tuple[str, str, int]  # an actor's (host, private cache directory, pid): where its crash journal is

_START_TIMEOUT_S = 300.0  # placing an actor and importing torch, Triton and the kernel's module in it
_PROBE_TIMEOUT_S = 10.0  # a head's port that does not accept a TCP connection in this long is not a Ray head
_CLEANUP_TIMEOUT_S = 10.0  # an actor removing its directory before it is killed
_HEAD = re.compile(r"^(?:ray://)?(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+):(\d+)/?$")  # (host, port) of an address


def _ray(executor: str = "ray") -> Any:
    try:
        import ray
    except ImportError as exc:
        raise OptionError(
            f'sweep(executor={executor!r}) needs Ray, which is not installed ({exc}): pip install "autotune[ray]" '
            "(or pip install 'ray>=2.9'), or use executor='local'"
        ) from None
    return ray


class SweepActor:
    """The actor class (made a Ray actor by `RayWorker`): a SweepWorker answering the driver's requests."""

    def __init__(self, spec: WorkerSpec, dead: _Home | None = None) -> None:
        inherited = _notes_left_by(dead)  # read first: starting a worker removes the dead actor's directory
        self.worker = SweepWorker(spec)
        journal.keep_notes(inherited, self.worker.directory)

    def fingerprint(self) -> str:
        return self.worker.fingerprint()

    def where(self) -> _Home:
        """Where the driver finds this actor's crash journal once it has died."""
        return socket.gethostname(), self.worker.directory, os.getpid()

    def cleanup(self) -> None:
        """Remove this actor's private cache directory: it is about to be killed."""
        release_worker_dir(self.worker.directory)

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
        self.ray = _ray(address or "ray")
        self.spec, self.worker_env, self.address = spec, list(worker_env), address
        self.requested = workers
        self.slots: list[RayWorker] = []
        self.connected_here = False

    def start(self) -> list[Slot]:
        ray = self.ray
        if ray.is_initialized():
            _check_same_cluster(ray, self.address)
        else:
            _connect(ray, self.address)
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
        remove_abandoned_worker_dirs()  # this host's actors' directories, of those killed before they removed theirs


def _notes_left_by(dead: _Home | None) -> list[tuple[str, journal.Note]]:
    """The crash-journal notes (file name, note) in a dead actor's directory, when it ran on this host: its own
    and those it inherited from the actors it replaced (every one a dead process's)."""
    if dead is None or dead[0] != socket.gethostname():
        return []
    return journal.notes_in(dead[1])


def _said(address: str | None) -> str:
    return f"sweep(executor={address or 'ray'!r})"


def _connect(ray: Any, address: str | None) -> None:
    """`ray.init` to `address` (else RAY_ADDRESS, else a new local runtime); an AutotuneError naming the address
    when no cluster answers there."""
    target = address or os.environ.get("RAY_ADDRESS", "").strip() or None
    where = f"the Ray cluster at {target!r}" + ("" if address else " (RAY_ADDRESS)")
    head = _HEAD.match(target or "")
    if head is not None:  # Ray waits minutes for a head that is not there: ask its port first
        host, port = head.group(1).strip("[]"), int(head.group(2))
        try:
            socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S).close()
        except OSError as exc:
            raise AutotuneError(
                f"{_said(address)}: {where} cannot be reached ({exc.strerror or exc}): start it (`ray start --head` "
                "there) or give the head's address, or use executor='local'"
            ) from None
    try:
        ray.init(address=address, log_to_driver=False)
    except Exception as exc:  # ConnectionError (no cluster for "auto"), RuntimeError, a version mismatch
        what = where if target is not None else "a new local Ray runtime"
        raise AutotuneError(
            f"{_said(address)}: could not connect to {what}: {type(exc).__name__}: {exc}; start a cluster "
            "(`ray start --head`) or give its address (a Ray address, or RAY_ADDRESS), or use executor='local'"
        ) from None


def _check_same_cluster(ray: Any, address: str | None) -> None:
    """Refuse an explicit address other than the cluster this process is already connected to (`ray.init`)."""
    if address is None or address == "auto":
        return
    try:
        connected = ray.get_runtime_context().gcs_address
    except Exception:  # a Ray Client connection has no GCS address here
        connected = "another address"
    head, there = _HEAD.match(address), _HEAD.match(connected or "")
    if head is not None and there is not None and not address.startswith("ray://"):
        if head.group(2) == there.group(2) and _ip(head.group(1)) == _ip(there.group(1)):
            return
    raise OptionError(
        f"{_said(address)}: this process is already connected to the Ray cluster at {connected} (ray.init), not "
        f"{address!r}: give executor='ray' to sweep on that cluster, or call ray.shutdown() first"
    )


def _ip(host: str) -> str:
    try:
        return socket.gethostbyname(host.strip("[]"))
    except OSError:
        return host


class RayWorker:
    """The driver's handle on one actor (`Slot`)."""

    def __init__(self, ray: Any, index: int, spec: WorkerSpec, env: dict[str, str], gpu: bool) -> None:
        self.ray, self.index, self.spec, self.env, self.gpu = ray, index, spec, env, gpu
        self.kind = ""
        self.actor: Any = None
        self.home: _Home | None = None  # the running actor's; its replacement inherits its crash-journal notes
        self._ready: Any = None
        self._where: Any = None
        self._calling = False  # a request is in flight (Ctrl-C stops it): no cleanup call is queued behind it

    def launch(self) -> None:
        options: dict[str, Any] = {"num_gpus": 1} if self.gpu else {"num_cpus": 1}
        if self.env:
            options["runtime_env"] = {"env_vars": self.env}
        actor_class = self.ray.remote(max_restarts=0, max_task_retries=0)(SweepActor)
        dead, self.home = self.home, None
        self.actor = actor_class.options(**options).remote(self.spec, dead)
        self._ready, self._where = self.actor.fingerprint.remote(), self.actor.where.remote()

    def wait_ready(self) -> None:
        try:
            self.kind = self._get(self._ready, timeout_s=_START_TIMEOUT_S)
            host, directory, pid = self._get(self._where, timeout_s=_START_TIMEOUT_S)
            self.home = (str(host), str(directory), int(pid))
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
        """Kill the actor, busy or idle (Ctrl-C: a busy one would go on tuning on its GPU, holding its resources).
        An idle actor removes its directory first; a busy or dead one's is removed by the next worker on its host,
        or the driver's `stop` on this one."""
        if self.actor is not None:
            if not self._calling:
                try:
                    self.ray.get(self.actor.cleanup.remote(), timeout=_CLEANUP_TIMEOUT_S)
                except Exception:
                    pass
            try:
                self.ray.kill(self.actor, no_restart=True)
            except Exception:  # already gone with its node
                pass
        self.actor = None

    def _get(self, ref: Any, timeout_s: float | None = None) -> Any:
        exceptions = self.ray.exceptions
        self._calling = True
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
            raise self._lost(exc) from None
        finally:
            self._calling = False

    def _lost(self, exc: BaseException) -> WorkerLost:
        """The WorkerLost of this slot's dead actor, naming the config it was measuring in its own process
        (isolate="off") where its crash journal is on this host."""
        home = self.home
        config = None if home is None or home[0] != socket.gethostname() else measuring_at_death(home[1], home[2])
        measuring = "" if config is None else f" {while_measuring(config)}"
        return WorkerLost(f"sweep actor {self.index} ({self.kind or 'starting'}) was lost{measuring}: {exc}", config)
