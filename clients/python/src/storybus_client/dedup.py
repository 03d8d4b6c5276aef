"""De-duplication of at-least-once delivery, on message_id."""

from __future__ import annotations

import os
import tempfile
import threading
from collections import OrderedDict
from typing import IO

from .clock import Clock, SystemClock

__all__ = ["Dedup", "DEFAULT_DEDUP_SIZE", "DEFAULT_DEDUP_WINDOW"]

#: The most message_ids a :class:`Dedup` remembers by default.
DEFAULT_DEDUP_SIZE = 100_000
#: How long, in seconds, a :class:`Dedup` remembers an id by default: a day.
DEFAULT_DEDUP_WINDOW = 24 * 3600.0


class Dedup:
    """Remembers the message_ids a consumer has handled, so that the
    duplicates of at-least-once delivery are dropped.

    Its memory is bounded: at most ``size`` ids, none for longer than
    ``window`` seconds; when full it forgets the id handled longest ago. A
    duplicate arriving later than that is handled again, so a consumer's
    handling should still be idempotent where it matters (a snapshot's
    sequence_number tells a newer one from an older one).

    ``Dedup()`` lives in memory; :meth:`open` also keeps its ids in a file,
    in the Go client's format, so that a consumer that restarts still drops
    what it handled before. It is safe for concurrent use.
    """

    def __init__(
        self,
        size: int = DEFAULT_DEDUP_SIZE,
        window: float = DEFAULT_DEDUP_WINDOW,
        clock: Clock | None = None,
    ) -> None:
        if size < 1 or window <= 0:
            raise ValueError("a de-duplicator needs a positive size and window")
        self._size = size
        self._window = window
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, float] = OrderedDict()  # id → handled at, oldest first
        self._path: str | None = None
        self._file: IO[bytes] | None = None
        self._lines = 0
        self._torn = False

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        size: int = DEFAULT_DEDUP_SIZE,
        window: float = DEFAULT_DEDUP_WINDOW,
        clock: Clock | None = None,
    ) -> Dedup:
        """Returns a de-duplicator that keeps its ids in the file at
        ``path`` as well, created if missing: the ids it holds within the
        window are remembered again. Each :meth:`done` appends a line
        (written, not synced: a machine that crashes may lose the last few,
        and their messages are then handled once more). The file is rewritten
        with only the remembered ids once it has grown to twice ``size``.
        One process at a time may use a file; :meth:`close` closes it."""
        d = cls(size, window, clock)
        d._path = os.fspath(path)
        d._load()
        with d._lock:
            d._rewrite()
        return d

    def seen(self, message_id: str) -> bool:
        """Whether ``message_id`` was marked done within the window."""
        with self._lock:
            at = self._seen.get(message_id)
            if at is None:
                return False
            if self._clock.time() - at >= self._window:
                del self._seen[message_id]
                return False
            return True

    def done(self, message_id: str) -> None:
        """Marks ``message_id`` as handled. A file-backed de-duplicator that
        cannot write its file still remembers the id in memory and raises
        the error; so does one given an id with a line break."""
        now = self._clock.time()
        with self._lock:
            self._add(message_id, now)
            if self._path is None:
                return
            if "\n" in message_id or "\r" in message_id:
                raise ValueError(f"message_id {message_id!r} has a line break: not kept in the de-duplication file")
            if self._file is None:
                raise ValueError("the de-duplication file is closed")
            if self._torn or self._lines + 1 >= 2 * self._size:
                self._rewrite()
                return
            try:
                self._file.write(_line(message_id, now))
                self._file.flush()
            except OSError:
                self._torn = True
                raise
            self._lines += 1

    def __len__(self) -> int:
        """How many ids are remembered."""
        with self._lock:
            return len(self._seen)

    def close(self) -> None:
        """Closes the file of a de-duplicator from :meth:`open`."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> Dedup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add(self, message_id: str, at: float) -> None:
        self._seen.pop(message_id, None)
        self._seen[message_id] = at
        while len(self._seen) > self._size:
            self._seen.popitem(last=False)
        # The ids are in the order they were handled: the expired ones are
        # the oldest.
        for oldest, t in list(self._seen.items()):
            if at - t < self._window:
                break
            del self._seen[oldest]

    def _load(self) -> None:
        """Remembers the ids of the file, in the order they were handled.
        Lines that do not parse (the torn end of a file written when the
        process stopped) are skipped."""
        assert self._path is not None
        try:
            with open(self._path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        now = self._clock.time()
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                continue
            ns, sep, rest = line.rstrip(b"\n").partition(b" ")
            if not sep or not rest or not ns.lstrip(b"-").isdigit():
                continue
            at = int(ns) / 1e9
            if now - at < self._window:
                self._add(rest.decode("utf-8", errors="replace"), at)

    def _rewrite(self) -> None:
        """Replaces the file by one of the remembered ids, atomically: a new
        file, synced, renamed over the old one, and kept open for appending."""
        assert self._path is not None
        data = b"".join(_line(i, at) for i, at in self._seen.items())
        directory = os.path.dirname(os.path.abspath(self._path))
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(self._path) + ".", dir=directory)
        f = os.fdopen(fd, "ab")
        try:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, self._path)
        except BaseException:
            f.close()
            try:
                os.remove(tmp)
            except FileNotFoundError:
                pass
            raise
        if self._file is not None:
            self._file.close()
        self._file, self._lines, self._torn = f, len(self._seen), False


def _line(message_id: str, at: float) -> bytes:
    """A line of the file: ``<handled at, Unix nanoseconds> <message_id>``."""
    return f"{int(at * 1_000_000_000)} {message_id}\n".encode()
