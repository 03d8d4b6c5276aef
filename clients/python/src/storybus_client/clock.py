"""The clock the client tells the time and waits by."""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Tells the time and waits. The client waits only through its clock, so
    that tests cross the 30 s retry window without sleeping."""

    def time(self) -> float:
        """Returns the time in seconds since the epoch, as :func:`time.time`."""
        ...

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> None:
        """Waits ``seconds``, or until ``stop`` is set."""
        ...


class SystemClock:
    """The wall clock."""

    def time(self) -> float:
        """Returns :func:`time.time`."""
        return time.time()

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> None:
        """Waits ``seconds``, or until ``stop`` is set."""
        if seconds <= 0:
            return
        if stop is None:
            time.sleep(seconds)
        else:
            stop.wait(seconds)
