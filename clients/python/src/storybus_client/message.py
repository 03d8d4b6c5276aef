"""SOM messages, serialised once."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = ["Message", "SNAPSHOT_TYPE"]

#: The message_type of a snapshot: a complete story.context.
SNAPSHOT_TYPE = "story.context"


class Message:
    """One SOM message, serialised once.

    Every send, retry and resend of it uses exactly these bytes, so that the
    bus recognises a retry: a message rebuilt for a retry, with a new
    timestamp, would be a different message under a reused message_id.

    ``Message(raw)`` wraps bytes you already have; :meth:`build` makes a new
    SOM 1.0 message. The client reads only the members it needs
    (message_id, message_type, the story or asset id); the bus validates the
    rest.
    """

    __slots__ = ("_raw", "_id", "_type", "_story_id", "_asset_id")

    def __init__(self, raw: bytes | str) -> None:
        """Wraps a serialised SOM message. Raises :class:`ValueError` when
        it is not a JSON object."""
        data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        if not data.lstrip().startswith(b"{"):
            raise ValueError("a SOM message is a JSON object")
        try:
            head = json.loads(data.decode("utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"a SOM message is a JSON object: {exc}") from exc
        if not isinstance(head, dict):
            raise ValueError("a SOM message is a JSON object")
        payload = head.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        self._raw = data
        # Members of unexpected types are the bus's to refuse.
        self._id = _str(head.get("message_id"))
        self._type = _str(head.get("message_type"))
        self._story_id = _str(payload.get("story_id"))
        self._asset_id = _str(payload.get("asset_id"))

    @classmethod
    def build(
        cls,
        *,
        message_type: str,
        system_id: str,
        payload: Mapping[str, Any],
        message_id: str | None = None,
        timestamp: dt.datetime | None = None,
        correlation_id: str | None = None,
    ) -> Message:
        """Serialises a new SOM 1.0 message once. Keep the returned message
        until its final answer and resend only it.

        ``message_id`` defaults to a new random UUID: give a new one to every
        new message, and never a new one to a retry. ``timestamp`` defaults
        to now and must carry a time zone; it is part of the content.
        """
        if timestamp is None:
            timestamp = dt.datetime.now(dt.timezone.utc)
        if timestamp.tzinfo is None or timestamp.utcoffset() is None:
            raise ValueError("the timestamp needs a time zone (datetime.timezone.utc, for example)")
        doc: dict[str, Any] = {
            "som_version": "1.0",
            "message_id": message_id or str(uuid.uuid4()),
            "message_type": message_type,
            "system_id": system_id,
            "timestamp": format_time(timestamp),
        }
        if correlation_id:
            doc["correlation_id"] = correlation_id
        doc["payload"] = dict(payload)
        try:
            raw = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"building the message: {exc}") from exc
        return cls(raw.encode("utf-8"))

    @property
    def id(self) -> str:
        """The message_id."""
        return self._id

    @property
    def type(self) -> str:
        """The message_type."""
        return self._type

    @property
    def raw(self) -> bytes:
        """The serialised message, byte for byte."""
        return self._raw

    @property
    def is_snapshot(self) -> bool:
        """Whether the message is a story.context snapshot."""
        return self._type == SNAPSHOT_TYPE

    @property
    def key(self) -> str:
        """What orders the message among others: its story, for the
        families that carry a story_id, else its asset, else the message
        alone."""
        if self._story_id:
            return "story:" + self._story_id
        if self._asset_id:
            return "asset:" + self._asset_id
        return "message:" + self._id

    def json(self) -> Any:
        """Returns the message parsed."""
        return json.loads(self._raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)

    def __repr__(self) -> str:
        return f"Message(id={self._id!r}, type={self._type!r}, key={self.key!r})"


def format_time(t: dt.datetime) -> str:
    """Formats a time as RFC 3339 in UTC, as Go's time.RFC3339Nano does:
    ``2026-11-29T09:00:00Z``, fractions without trailing zeros."""
    u = t.astimezone(dt.timezone.utc)
    s = u.strftime("%Y-%m-%dT%H:%M:%S")
    if u.microsecond:
        s += f".{u.microsecond:06d}".rstrip("0")
    return s + "Z"


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""
