"""Fixtures: one real `storybus dev` for the whole session, and the pieces
the tests wrap around the client (a recording transport, a fake clock)."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from storybus_client import HTTPTransport, Request, Response

REPO = Path(__file__).resolve().parents[3]
WORKSPACE = "newsroom"
CMS_ID = "cms"
CMS_SECRET = "cms-dev-secret-0123456789abcdef0"
WIRE_ID = "wire"
WIRE_SECRET = "wire-dev-secret-0123456789abcdef"

_BANNER = re.compile(r"on (https?://\S+) \(operations on (http://\S+)\)")


@dataclass
class Bus:
    """A running `storybus dev`."""

    url: str
    ops: str
    binary: str
    process: subprocess.Popen[str]
    ca_file: str = ""


def _binary(tmp: Path) -> str:
    """The storybus binary: $STORYBUS_BIN (make test-python builds it), or
    one built from this repository."""
    given = os.environ.get("STORYBUS_BIN")
    if given:
        return given
    out = tmp / "storybus"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/storybus"], cwd=REPO, check=True, timeout=900)
    return str(out)


def start_dev(binary: str, data_dir: Path, *extra: str) -> Bus:
    """Starts `storybus dev` on free ports with a fresh data directory and
    waits, with a generous deadline, for its banner and /readyz."""
    args = [binary, "dev", "--listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0",
            "--data-dir", str(data_dir), "--access-log=false", *extra]
    log = open(data_dir.parent / (data_dir.name + ".log"), "w")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, "TMPDIR": str(data_dir.parent)})
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 90
    url = ops = ca = ""
    while not url or (("--tls" in extra) and not ca):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"storybus dev did not start; see {log.name}")
        try:
            line = lines.get(timeout=min(left, 1.0))
        except queue.Empty:
            continue
        if m := _BANNER.search(line):
            url, ops = m.group(1), m.group(2)
        if line.startswith("CA certificate: "):
            ca = line.removeprefix("CA certificate: ").strip()
    while True:
        try:
            with urllib.request.urlopen(ops + "/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"storybus dev never got ready; see {log.name}")
        time.sleep(0.1)
    return Bus(url=url, ops=ops, binary=binary, process=proc, ca_file=ca)


def stop_dev(bus: Bus) -> None:
    """Stops the bus gracefully, or kills it after a deadline."""
    bus.process.terminate()
    try:
        bus.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        bus.process.kill()
        bus.process.wait()


@pytest.fixture(scope="session")
def binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The storybus binary the tests run."""
    return _binary(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def bus(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bus]:
    """One `storybus dev` for the whole session."""
    b = start_dev(binary, tmp_path_factory.mktemp("dev") / "data")
    yield b
    stop_dev(b)


@dataclass
class Sent:
    """One request the recording transport sent, and what came of it."""

    request: Request
    status: int  # 0: no answer
    error: BaseException | None = None
    response: Response | None = None


@dataclass
class Recorder:
    """A transport around the real one that records every request, and may
    add headers to each (``decorate``)."""

    inner: Callable[[Request, float], Response] = field(default_factory=HTTPTransport)
    decorate: Callable[[Request], Request] | None = None
    sent: list[Sent] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: Request, timeout: float) -> Response:
        if self.decorate is not None:
            request = self.decorate(request)
        try:
            res = self.inner(request, timeout)
        except OSError as exc:
            with self.lock:
                self.sent.append(Sent(request, 0, exc))
            raise
        with self.lock:
            self.sent.append(Sent(request, res.status, response=res))
        return res

    def publishes(self) -> list[Sent]:
        """The publish requests."""
        with self.lock:
            return [s for s in self.sent if s.request.url.endswith("/messages")]

    def token_requests(self) -> int:
        """How many token requests were sent."""
        with self.lock:
            return sum(1 for s in self.sent if s.request.url.endswith("/tokens"))


def with_header(request: Request, name: str, value: str) -> Request:
    """Returns the request with one more header."""
    return replace(request, headers={**request.headers, name: value})


class FakeClock:
    """A clock whose sleep records the wait and moves time on at once."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def time(self) -> float:
        with self._lock:
            return self._now

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self._now += max(seconds, 0.0)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
