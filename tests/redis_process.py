"""A real redis-server for the tests: started on a free loopback port with no persistence, stopped after."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


def redis_server_path() -> str | None:
    return shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if Path(p).exists()), None
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisProcess:
    password: str | None = None

    def __init__(self, directory: Path, password: str | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.password = password  # started with --requirepass: clients must authenticate
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, password=self.password)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                redis_server_path(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                *(["--requirepass", self.password] if self.password else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.client().ping():
                    return
            except Exception as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from exc
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
