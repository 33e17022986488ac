"""A sweep's jobs: one key (one maker) on one device kind, and the queue of a kind's pending jobs that the driver's
threads, one per worker of that kind, take them from."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from .worker import Maker, MakerSet

__all__ = ["Job", "JobQueue"]


@dataclass
class Job:
    index: int
    maker: Maker | MakerSet  # a set of calls: one config tuned for all of them (Tuning.objective)
    kind: str
    lost_on: int | None = None  # the worker that died under it: retried elsewhere when another can
    attempts: int = 0


class JobQueue:
    """The pending jobs of one device kind. A worker waits while another of its kind may still hand a job back."""

    def __init__(self, jobs: list[Job], workers: int, stopping: threading.Event) -> None:
        self.jobs, self.workers, self.running, self.stopping = deque(jobs), workers, 0, stopping
        self.cond = threading.Condition()

    def take(self, worker: int) -> Job | None:
        with self.cond:
            while not self.stopping.is_set():
                job = next((j for j in self.jobs if j.lost_on != worker or self.workers == 1), None)
                if job is not None:
                    self.jobs.remove(job)
                    self.running += 1
                    return job
                if not self.jobs and self.running == 0:
                    return None
                self.cond.wait(0.2)
            return None

    def finish(self, job: Job, again: bool = False) -> None:
        with self.cond:
            self.running -= 1
            if again:
                self.jobs.append(job)
            self.cond.notify_all()

    def pending(self) -> bool:
        """Whether a job waits to be taken (one handed back included)."""
        with self.cond:
            return bool(self.jobs)

    def claim_all(self) -> list[Job]:
        """Every pending job, taken out of the queue (a split kind runs one job per group of workers)."""
        with self.cond:
            jobs, self.jobs = list(self.jobs), deque()
            return jobs

    def leave(self) -> list[Job]:
        """A worker of this kind is gone for good; the jobs nobody is left to run."""
        with self.cond:
            self.workers -= 1
            self.cond.notify_all()
            left = list(self.jobs) if self.workers == 0 else []
            if left:
                self.jobs.clear()
            return left
