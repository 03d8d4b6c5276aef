"""W3C trace context, passed from a producer's trace through the bus to the
consumers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["TraceContext"]

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


@dataclass(frozen=True)
class TraceContext:
    """The ``traceparent`` and ``tracestate`` headers of a W3C trace
    context (https://www.w3.org/TR/trace-context/).

    A publish carries it to the bus, which hands it to consumers with the
    message. With OpenTelemetry, ``TraceContext.from_headers(carrier)``
    reads what ``opentelemetry.propagate.inject(carrier)`` wrote.
    """

    traceparent: str
    tracestate: str = ""

    def __post_init__(self) -> None:
        m = _TRACEPARENT.match(self.traceparent)
        if (
            m is None
            or m.group(1) == "ff"
            or m.group(2) == "0" * 32
            or m.group(3) == "0" * 16
            or (m.group(1) == "00" and m.group(5) is not None)
        ):
            raise ValueError(f"not a W3C traceparent: {self.traceparent!r}")

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> TraceContext | None:
        """Reads the trace context of headers (any case), or returns None
        when they carry none or a malformed one."""
        lower = {k.lower(): v for k, v in headers.items()}
        parent = lower.get("traceparent", "").strip()
        if not parent:
            return None
        try:
            return cls(parent, lower.get("tracestate", "").strip())
        except ValueError:
            return None

    @property
    def trace_id(self) -> str:
        """The trace's id, 32 hexadecimal digits."""
        return self.traceparent.split("-")[1]

    def headers(self) -> dict[str, str]:
        """Returns the headers that carry the trace context."""
        h = {"traceparent": self.traceparent}
        if self.tracestate:
            h["tracestate"] = self.tracestate
        return h
