"""The consumer: pulls a workspace's messages over the bus's HTTP pull API,
acknowledges them and drops duplicates."""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _wire
from .clock import Clock, SystemClock
from .dedup import Dedup
from .errors import NoAnswerError, StorybusError
from .retry import RetryPolicy
from .tokens import TokenSource
from .trace import TraceContext
from .transport import HTTPTransport, Request, Response, Transport

__all__ = ["Consumer", "Delivery", "Handler"]

log = logging.getLogger("storybus_client")

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

#: The most ack_ids of one acknowledgement request.
_MAX_ACKS = 1000


@dataclass(frozen=True)
class Delivery:
    """One delivered message."""

    message_id: str
    message_type: str
    family: str
    #: Acknowledges this delivery, and only this one.
    ack_id: str
    #: The deliveries of the message to this consumer: 2 and more are
    #: redeliveries.
    delivery: int
    #: The SOM message exactly as the bus accepted it, byte for byte.
    message: bytes
    #: The W3C trace context the message was published in, when its
    #: producer or the bus traced it.
    traceparent: str = ""
    tracestate: str = ""

    def json(self) -> Any:
        """Returns the message parsed."""
        return json.loads(self.message)

    @property
    def trace(self) -> TraceContext | None:
        """The trace context the message was published in: continue it when
        handling the message."""
        return TraceContext.from_headers({"traceparent": self.traceparent, "tracestate": self.tracestate})


#: Handles one message. An exception leaves the message unacknowledged: it is
#: delivered again after the bus's ack timeout (30 s).
Handler = Callable[[Delivery], None]


class Consumer:
    """Pulls a workspace's messages over the bus's HTTP pull API.

    Delivery is at least once: a message not acknowledged within the bus's
    ack timeout (30 s) is delivered again, and :meth:`run` drops the
    duplicates by message_id. ``name`` names a durable subscription (1 to
    64 letters, digits, '-' or '_'): a consumer that comes back under the
    same name carries on where it left off.
    """

    def __init__(
        self,
        url: str,
        workspace: str,
        name: str,
        tokens: TokenSource,
        *,
        families: Sequence[str] = (),
        max_messages: int = 10,
        wait: float = 20.0,
        dedup: Dedup | None = None,
        retry: RetryPolicy | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        jitter: Callable[[], float] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        """
        ``families`` are the families to receive; none means every family
        the connection may consume. ``max_messages`` is the most messages one
        pull returns (1 to 100); ``wait`` how long, in seconds, a pull waits
        for a first message (0 to 20; 0 answers at once). ``dedup`` drops
        redelivered messages (default an in-memory :class:`Dedup`;
        :meth:`Dedup.open` keeps them across restarts). ``retry`` paces the
        pulls after failures: :meth:`run` keeps pulling until stopped.
        ``on_error`` is told of every failed pull, acknowledgement and
        handler call that :meth:`run` carries on after.
        """
        if not _NAME.match(name):
            raise ValueError("a consumer name is 1 to 64 letters, digits, '-' or '_'")
        if tokens is None:
            raise ValueError("a token source is required")
        if not 1 <= max_messages <= 100:
            raise ValueError("max_messages is 1 to 100")
        if not 0 <= wait <= 20:
            raise ValueError("wait is 0 to 20 seconds")
        base = _wire.workspace_base(url, workspace) + "/consumers/" + name
        query = {"max": str(max_messages), "wait": f"{round(wait * 1000)}ms"}
        if families:
            query["family"] = ",".join(families)
        self._pull_url = base + "/messages?" + urllib.parse.urlencode(query)
        self._ack_url = base + "/acks"
        self._tokens = tokens
        self._transport: Transport = transport if transport is not None else HTTPTransport()
        self._timeout = wait + 15.0
        self._dedup = dedup if dedup is not None else Dedup(clock=clock)
        self._retry = retry if retry is not None else RetryPolicy()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._jitter = jitter if jitter is not None else random.random
        self._on_error = on_error
        self._stop = threading.Event()

    @property
    def dedup(self) -> Dedup:
        """The consumer's de-duplicator."""
        return self._dedup

    def fetch(self) -> list[Delivery]:
        """Pulls once: returns as soon as a message is there, with up to
        ``max_messages`` of them, or empty-handed after ``wait``. Duplicates
        are not dropped here; :meth:`run` drops them. A 401 is retried once
        with a fresh token."""
        res = self._call("GET", self._pull_url, None)
        try:
            return _deliveries(res.body)
        except ValueError as exc:
            raise NoAnswerError(cause=ValueError(f"the pull answer is not JSON: {exc}")) from exc

    def ack(self, *deliveries: Delivery) -> None:
        """Acknowledges deliveries: they are not delivered again."""
        # No action: a plain ack, which every bus understands.
        self._settle({}, deliveries)

    def nak(self, *deliveries: Delivery, delay: float = 0.0) -> None:
        """Gives deliveries back unhandled: they are delivered again after
        ``delay`` seconds (0: at once; at most an hour)."""
        r: dict[str, str] = {"action": "nak"}
        if delay > 0:
            r["delay"] = f"{round(delay * 1000)}ms"
        self._settle(r, deliveries)

    def in_progress(self, *deliveries: Delivery) -> None:
        """Reports that deliveries are still being handled: their ack
        timeout (30 s) starts again."""
        self._settle({"action": "in_progress"}, deliveries)

    def term(self, *deliveries: Delivery) -> None:
        """Gives up on deliveries the consumer can never handle: they are
        not delivered again, as if acknowledged."""
        self._settle({"action": "term"}, deliveries)

    def run(self, handler: Handler, stop: threading.Event | None = None) -> None:
        """Pulls and hands every message to ``handler``, once per
        message_id, until :meth:`stop` is called or ``stop`` is set.

        A handled message is acknowledged; a duplicate of a handled one is
        acknowledged without calling the handler; a message whose handler
        raised is left to be delivered again. Temporary failures (no answer,
        429, 5xx) are retried with backoff, honouring Retry-After, for as
        long as it runs; any other failure (a 401 after a fresh token, a 403)
        ends it with that error.
        """
        stop = stop if stop is not None else self._stop
        try:
            self._run(handler, stop)
        finally:
            # A later run starts afresh.
            self._stop.clear()

    def _run(self, handler: Handler, stop: threading.Event) -> None:
        failures = 0
        while not self._stopped(stop):
            try:
                deliveries = self.fetch()
            except StorybusError as exc:
                if self._stopped(stop):
                    return
                if not exc.temporary:
                    raise
                self._report(exc)
                failures += 1
                self._clock.sleep(max(self._retry.backoff(failures, self._jitter()), exc.retry_after), stop)
                continue
            failures = 0
            self._handle(deliveries, handler, lambda: self._stopped(stop))

    def run_once(self, handler: Handler) -> None:
        """Pulls once and hands what came to ``handler`` as :meth:`run`
        does. A failed pull is raised, not retried."""
        self._handle(self.fetch(), handler, lambda: False)

    def stop(self) -> None:
        """Makes :meth:`run` return once the pull or message at hand is done
        (a pull waits up to ``wait``): the rest of its pull is left
        unacknowledged, to be delivered again."""
        self._stop.set()

    def _stopped(self, stop: threading.Event) -> bool:
        return stop.is_set() or self._stop.is_set()

    def _report(self, exc: BaseException) -> None:
        if self._on_error is not None:
            self._on_error(exc)
        else:
            log.warning("consumer: %s", exc)

    def _handle(self, deliveries: Iterable[Delivery], handler: Handler, stopped: Callable[[], bool]) -> None:
        """Hands a pull's messages to the handler, once per message_id,
        until stopped, and acknowledges the handled ones and the duplicates."""
        done: list[Delivery] = []
        for d in deliveries:
            if stopped():
                break
            if d.message_id and self._dedup.seen(d.message_id):
                done.append(d)
                continue
            try:
                handler(d)
            except Exception as exc:
                self._report(exc)
                continue
            if d.message_id:
                try:
                    self._dedup.done(d.message_id)
                except (OSError, ValueError) as exc:
                    self._report(exc)
            done.append(d)
        if done:
            # Handled messages are acknowledged even when stopped. A failed
            # acknowledgement means a redelivery, which the de-duplicator
            # drops.
            try:
                self.ack(*done)
            except StorybusError as exc:
                self._report(exc)

    def _settle(self, request: dict[str, str], deliveries: Sequence[Delivery]) -> None:
        """Sends the request's action for deliveries, at most 1,000 per
        request."""
        for i in range(0, len(deliveries), _MAX_ACKS):
            body: dict[str, Any] = {"ack_ids": [d.ack_id for d in deliveries[i : i + _MAX_ACKS]], **request}
            self._call("POST", self._ack_url, json.dumps(body).encode())

    def _call(self, method: str, url: str, body: bytes | None) -> Response:
        """Sends one request with a token, once more with a fresh token
        after a 401, and returns a 200 answer or raises."""
        refreshed = False
        while True:
            token = self._tokens.token()
            headers = {"Accept": "application/json", "Authorization": "Bearer " + token, "User-Agent": _wire.USER_AGENT}
            if body is not None:
                headers["Content-Type"] = "application/json"
            try:
                res = self._transport(Request(method, url, headers, body), self._timeout)
            except OSError as exc:
                raise _wire.no_answer(exc) from exc
            if res.status == 200:
                return res
            if res.status == 401 and not refreshed:
                self._tokens.invalidate(token)
                refreshed = True
                continue
            raise _wire.failure(res, self._clock.time())


def _deliveries(body: bytes) -> list[Delivery]:
    """Reads a pull's answer, keeping each message's exact bytes."""
    text = body.decode("utf-8")
    dec = json.JSONDecoder()
    out: list[Delivery] = []
    for fields, raw in _objects_of(text, dec, "messages", "message"):

        def s(name: str) -> str:
            v = fields.get(name)
            return v if isinstance(v, str) else ""

        n = fields.get("delivery")
        out.append(
            Delivery(
                message_id=s("message_id"),
                message_type=s("message_type"),
                family=s("family"),
                ack_id=s("ack_id"),
                delivery=n if isinstance(n, int) and not isinstance(n, bool) else 0,
                message=raw.encode("utf-8"),
                traceparent=s("traceparent"),
                tracestate=s("tracestate"),
            )
        )
    return out


_WS = re.compile(r"[ \t\n\r]*")


def _objects_of(text: str, dec: json.JSONDecoder, array: str, raw_member: str) -> list[tuple[dict[str, Any], str]]:
    """Reads ``{"<array>": [{…}, …], …}`` and returns each element's members
    with ``raw_member``'s exact JSON text beside them. The rest of the answer
    is read as plain JSON."""

    def ws(i: int) -> int:
        m = _WS.match(text, i)
        return m.end() if m else i

    def expect(i: int, ch: str) -> int:
        i = ws(i)
        if i >= len(text) or text[i] != ch:
            raise ValueError(f"expected {ch!r} at {i}")
        return i + 1

    def members(i: int, on_value: Callable[[str, int], int]) -> int:
        """Walks an object's members from just after its '{'; returns the
        index after its '}'."""
        i = ws(i)
        if i < len(text) and text[i] == "}":
            return i + 1
        while True:
            i = ws(i)
            key, i = dec.raw_decode(text, i)
            if not isinstance(key, str):
                raise ValueError(f"expected a member name at {i}")
            i = ws(expect(i, ":"))
            i = on_value(key, i)
            i = ws(i)
            if i < len(text) and text[i] == ",":
                i += 1
                continue
            return expect(i, "}")

    found: list[tuple[dict[str, Any], str]] = []

    def element(i: int) -> int:
        fields: dict[str, Any] = {}
        raw = ["null"]

        def value(key: str, j: int) -> int:
            v, end = dec.raw_decode(text, j)
            fields[key] = v
            if key == raw_member:
                raw[0] = text[j:end]
            return int(end)

        i = members(expect(i, "{"), value)
        found.append((fields, raw[0]))
        return i

    def top(key: str, i: int) -> int:
        if key != array:
            _, end = dec.raw_decode(text, i)
            return int(end)
        i = ws(i)
        if text.startswith("null", i):
            return i + 4
        i = expect(i, "[")
        i = ws(i)
        if i < len(text) and text[i] == "]":
            return i + 1
        while True:
            i = ws(element(i))
            if i < len(text) and text[i] == ",":
                i += 1
                continue
            return expect(i, "]")

    end = members(expect(0, "{"), top)
    if ws(end) != len(text):
        raise ValueError("trailing data")
    return found
