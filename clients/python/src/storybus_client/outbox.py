"""The outbox: messages the client could not deliver, kept unchanged for a
later resend."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import StorybusError
from .message import Message, format_time

__all__ = ["Entry", "Outbox", "FileOutbox"]


@dataclass(frozen=True)
class Entry:
    """One message in an outbox."""

    #: Names the entry in its outbox.
    id: str
    message_id: str
    message_type: str
    #: The story (or asset) that orders the entry.
    key: str
    #: When the message was first kept.
    kept_at: dt.datetime
    #: Every send of the message, over every resend.
    attempts: int = 0
    #: The last answer's status and rule, 0 and "" when there was none.
    status: int = 0
    rule: str = ""
    #: The last failure, for people.
    reason: str = ""
    #: Set for an entry the bus refused on a resend.
    refused: bool = False
    #: The message, byte for byte.
    message: bytes = b""

    def recorded(self, cause: StorybusError | None) -> Entry:
        """Returns the entry after another failure, ``cause``."""
        if cause is None:
            return self
        return dataclasses.replace(
            self,
            attempts=self.attempts + cause.attempts,
            status=cause.status,
            rule=cause.rule,
            reason=str(cause),
        )


class Outbox(Protocol):
    """Where the client keeps the messages that have no final answer, in
    story order, until a resend delivers them. :class:`FileOutbox` keeps
    them on disk; any other store (a database table, say) can stand in."""

    def put(self, message: Message, cause: StorybusError | None, at: float) -> Entry:
        """Keeps ``message`` behind every message of its story already
        kept; ``at`` is the time in seconds since the epoch."""
        ...

    def list_pending(self) -> list[Entry]:
        """Returns the pending entries, oldest first."""
        ...

    def list_refused(self) -> list[Entry]:
        """Returns the entries the bus refused on a resend, oldest first.
        They are never resent; an operator reads and removes them."""
        ...

    def get(self, entry_id: str) -> Entry:
        """Returns the entry with the id; raises KeyError when there is none."""
        ...

    def remove(self, entry_id: str) -> None:
        """Deletes an entry; an entry already gone is no error."""
        ...

    def held(self, key: str) -> bool:
        """Whether the story ``key`` has pending entries."""
        ...

    def pending(self, key: str) -> list[Entry]:
        """Returns the story's pending entries, in order."""
        ...

    def keys(self) -> list[str]:
        """Returns the stories with pending entries, the story of the
        oldest entry first."""
        ...

    def update(self, entry: Entry, cause: StorybusError) -> Entry:
        """Records another failed resend of a pending entry."""
        ...

    def refuse(self, entry: Entry, cause: StorybusError) -> Entry:
        """Moves an entry the bus refused out of the pending ones."""
        ...


_PENDING = "pending"
_REFUSED = "refused"
_EXT = ".msg"


class FileOutbox:
    """An :class:`Outbox` in a directory, in the layout of the Go client and
    ``storybus outbox`` (which can list and resend it)::

        pending/<story>/<time>-<message_id>.msg   waiting for a resend, in story order
        refused/<time>-<message_id>.msg           refused by the bus on a resend

    A ``.msg`` file is one line of JSON metadata followed by the message's
    bytes. Every file is written to a temporary name, synced and then linked
    into place, so a crash never leaves half an entry. It survives restarts
    of the process; several processes may share it.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        """Opens, or creates, the outbox in ``directory``."""
        self._dir = os.fspath(directory)
        if not self._dir:
            raise ValueError("the outbox needs a directory")
        for d in (_PENDING, _REFUSED):
            os.makedirs(os.path.join(self._dir, d), mode=0o700, exist_ok=True)

    @property
    def directory(self) -> str:
        """The outbox's directory."""
        return self._dir

    def put(self, message: Message, cause: StorybusError | None, at: float) -> Entry:
        """Keeps ``message``; see :meth:`Outbox.put`."""
        kept_at = dt.datetime.fromtimestamp(at, dt.timezone.utc)
        base = Entry(
            id="",
            message_id=message.id,
            message_type=message.type,
            key=message.key,
            kept_at=kept_at,
            message=message.raw,
        ).recorded(cause)
        key_dir = os.path.join(self._dir, _PENDING, _encode_key(base.key))
        for attempt in range(11):
            os.makedirs(key_dir, mode=0o700, exist_ok=True)
            stamp = int(at * 1_000_000_000)
            last = _last_stamp(key_dir)
            if stamp <= last:
                stamp = last + 1
            name = f"{stamp:020d}-{_safe_name(base.message_id)}{_EXT}"
            entry = dataclasses.replace(base, id=f"{_PENDING}/{_encode_key(base.key)}/{name}")
            try:
                _write_entry(os.path.join(key_dir, name), entry, replace=False)
                return entry
            except (FileExistsError, FileNotFoundError):
                # Another process took the name, or removed the story's
                # emptied directory meanwhile: try again.
                if attempt == 10:
                    raise
        raise AssertionError("unreachable")

    def list_pending(self) -> list[Entry]:
        """Returns the pending entries, oldest first."""
        out: list[Entry] = []
        pending = os.path.join(self._dir, _PENDING)
        for name in sorted(os.listdir(pending)):
            if os.path.isdir(os.path.join(pending, name)):
                out.extend(self._entries(f"{_PENDING}/{name}"))
        return _sorted(out)

    def list_refused(self) -> list[Entry]:
        """Returns the refused entries, oldest first."""
        return _sorted(self._entries(_REFUSED))

    def get(self, entry_id: str) -> Entry:
        """Returns the entry with the id; raises KeyError when there is none."""
        try:
            return _read_entry(self._path(entry_id), entry_id)
        except FileNotFoundError:
            raise KeyError(entry_id) from None

    def remove(self, entry_id: str) -> None:
        """Deletes an entry, and its story's directory when it was the last."""
        path = self._path(entry_id)
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        parent = os.path.dirname(path)
        if os.path.basename(os.path.dirname(parent)) == _PENDING:
            try:
                os.rmdir(parent)  # only when the story has no entry left
            except OSError:
                pass

    def held(self, key: str) -> bool:
        """Whether the story has pending entries."""
        return bool(_entry_names(os.path.join(self._dir, _PENDING, _encode_key(key))))

    def pending(self, key: str) -> list[Entry]:
        """Returns the story's pending entries, in order."""
        return self._entries(f"{_PENDING}/{_encode_key(key)}")

    def keys(self) -> list[str]:
        """Returns the stories with pending entries, oldest first."""
        keys: list[str] = []
        for e in self.list_pending():
            if e.key not in keys:
                keys.append(e.key)
        return keys

    def update(self, entry: Entry, cause: StorybusError) -> Entry:
        """Records another failed resend of a pending entry."""
        updated = entry.recorded(cause)
        _write_entry(self._path(entry.id), updated, replace=True)
        return updated

    def refuse(self, entry: Entry, cause: StorybusError) -> Entry:
        """Moves an entry the bus refused to ``refused/``."""
        moved = dataclasses.replace(
            entry.recorded(cause), refused=True, id=f"{_REFUSED}/{entry.id.rsplit('/', 1)[-1]}"
        )
        _write_entry(self._path(moved.id), moved, replace=True)
        self.remove(entry.id)
        return moved

    def _path(self, entry_id: str) -> str:
        """Resolves an entry id, refusing any that leaves the outbox."""
        parts = entry_id.split("/")
        ok = (
            entry_id.endswith(_EXT)
            and all(p not in ("", ".", "..") for p in parts)
            and ((len(parts) == 3 and parts[0] == _PENDING) or (len(parts) == 2 and parts[0] == _REFUSED))
        )
        if not ok:
            raise KeyError(f"no outbox entry {entry_id!r}")
        return os.path.join(self._dir, *parts)

    def _entries(self, rel: str) -> list[Entry]:
        out = []
        for name in _entry_names(os.path.join(self._dir, *rel.split("/"))):
            entry_id = f"{rel}/{name}"
            try:
                out.append(_read_entry(self._path(entry_id), entry_id))
            except FileNotFoundError:
                continue  # resent meanwhile
        return out


def _entry_names(directory: str) -> list[str]:
    """Lists a directory's entry files in order; a missing directory has none."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.endswith(_EXT) and not n.startswith("."))


def _last_stamp(directory: str) -> int:
    names = _entry_names(directory)
    if not names:
        return 0
    try:
        return int(names[-1].split("-", 1)[0])
    except ValueError:
        return 0


def _sorted(entries: Sequence[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: e.id.rsplit("/", 1)[-1])


def _meta(e: Entry) -> dict[str, Any]:
    """The entry's metadata line, with the Go client's member names."""
    m: dict[str, Any] = {
        "id": e.id,
        "message_id": e.message_id,
        "message_type": e.message_type,
        "key": e.key,
        "kept_at": format_time(e.kept_at),
        "attempts": e.attempts,
    }
    if e.status:
        m["status"] = e.status
    if e.rule:
        m["rule"] = e.rule
    if e.reason:
        m["reason"] = e.reason
    if e.refused:
        m["refused"] = True
    return m


def _write_entry(path: str, e: Entry, *, replace: bool) -> None:
    """Writes an entry durably: a temporary file, synced, then linked to its
    name (which must not exist) or, with ``replace``, renamed over it; then
    the directory is synced."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    data = json.dumps(_meta(e), ensure_ascii=False, separators=(",", ":")).encode() + b"\n" + e.message
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
    _sync_dir(directory)


def _sync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_entry(path: str, entry_id: str) -> Entry:
    with open(path, "rb") as f:
        data = f.read()
    meta, sep, message = data.partition(b"\n")
    try:
        m = json.loads(meta) if sep else None
    except ValueError:
        m = None
    if not isinstance(m, dict):
        raise ValueError(f"outbox entry {entry_id} is damaged")
    return Entry(
        id=entry_id,
        message_id=str(m.get("message_id", "")),
        message_type=str(m.get("message_type", "")),
        key=str(m.get("key", "")),
        kept_at=_parse_time(str(m.get("kept_at", ""))),
        attempts=int(m.get("attempts", 0) or 0),
        status=int(m.get("status", 0) or 0),
        rule=str(m.get("rule", "")),
        reason=str(m.get("reason", "")),
        refused=bool(m.get("refused", False)),
        message=message,
    )


_FRACTION = re.compile(r"\.(\d+)")


def _parse_time(s: str) -> dt.datetime:
    """Reads an RFC 3339 time as Go writes it (up to nine fractional digits)."""
    s = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], s, count=1)
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return dt.datetime.fromtimestamp(0, dt.timezone.utc)
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def _encode_key(key: str) -> str:
    """Makes a story key a directory name."""
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def _safe_name(message_id: str) -> str:
    """Keeps a message_id usable in a file name."""
    if not message_id:
        return "no-message-id"
    return "".join(c if (c.isascii() and c.isalnum()) or c == "-" else "_" for c in message_id)
