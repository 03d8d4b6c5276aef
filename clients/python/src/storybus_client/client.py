"""The publisher: SOM messages to the bus, with the documented retry
discipline."""

from __future__ import annotations

import collections
import functools
import hashlib
import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from . import _wire
from .clock import Clock, SystemClock
from .errors import BadRequestError, HeldError, StorybusError, Violation
from .message import Message
from .outbox import Entry, Outbox
from .retry import RetryPolicy
from .tokens import TokenSource
from .trace import TraceContext
from .transport import HTTPTransport, Request, Transport

__all__ = ["Client", "PublishResult", "ResendResult", "SANDBOX_HEADER", "SANDBOX_LOST"]

#: The header that asks a sandbox workspace for an answer.
SANDBOX_HEADER = "Storybus-Sandbox-Answer"
#: The sandbox answer that publishes the message and drops the connection.
SANDBOX_LOST = "lost"

#: How many snapshots refused with 409 the client remembers, so that they are
#: never sent again.
MAX_REFUSED = 10_000

log = logging.getLogger("storybus_client")

_T = TypeVar("_T")


@dataclass(frozen=True)
class PublishResult:
    """A message's final success."""

    message_id: str
    message_type: str
    family: str
    #: 202 (accepted and published) or 200 (already published).
    status: int
    #: Set on 200: this exact message was published before.
    duplicate: bool
    #: Warnings: log them, they are not failures.
    tolerated: tuple[Violation, ...]
    #: How many times the message was sent.
    attempts: int


@dataclass(frozen=True)
class ResendResult:
    """What became of one outbox entry in a resend."""

    entry: Entry
    #: Set when the message was delivered (202 or 200); the entry is removed.
    result: PublishResult | None = None
    #: Set otherwise: the entry stays pending (a temporary failure, and the
    #: story's later entries wait), moved to the refused entries (a final
    #: refusal), or waits behind an earlier entry of its story (HeldError).
    error: BaseException | None = None


class _Job:
    """One turn in a story's queue: a call and the future of its result."""

    __slots__ = ("run", "future")

    def __init__(self, run: Callable[[], Any]) -> None:
        self.run = run
        self.future: Future[Any] = Future()

    def __call__(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            self.future.set_result(self.run())
        except BaseException as exc:
            self.future.set_exception(exc)


class Client:
    """Publishes SOM messages with the documented retry discipline. It is
    safe for concurrent use; use it as a context manager, or call
    :meth:`close`.

    - Every send, retry and resend of a :class:`Message` uses its bytes.
    - Only timeouts, network errors, 408, 429 and 5xx are retried, with
      exponential backoff and jitter, waiting at least Retry-After, for a
      bounded number of attempts that covers at least 30 s (``retry``).
    - A 401 is retried once, at once, with a fresh token; a second is final.
    - 400, 403, 409 and 413 are never retried, and a snapshot refused with
      409 is never sent again.
    - While one of a story's messages is retried, the story's next messages
      wait; other stories carry on.
    - A message without a final answer is kept, unchanged, in the
      ``outbox``, and resent before its story's next message.
    """

    def __init__(
        self,
        url: str,
        workspace: str,
        tokens: TokenSource,
        *,
        transport: Transport | None = None,
        attempt_timeout: float = 15.0,
        retry: RetryPolicy | None = None,
        outbox: Outbox | None = None,
        clock: Clock | None = None,
        jitter: Callable[[], float] | None = None,
        on_alert: Callable[[StorybusError], None] | None = None,
        sandbox_answer: str | None = None,
        trace_context: Callable[[], TraceContext | None] | None = None,
        max_workers: int = 8,
    ) -> None:
        """
        ``tokens`` is usually a :class:`~storybus_client.ClientCredentials`.
        ``transport`` sends the requests (default :class:`HTTPTransport`);
        ``attempt_timeout`` bounds one attempt, 15 s by default, longer than
        the bus's own 10 s bound on a publish. Without an ``outbox``, a
        message without a final answer is only raised to the caller, and is
        the caller's to keep. ``clock`` and ``jitter`` (a random fraction in
        [0, 1)) default to the wall clock and :func:`random.random`.
        ``on_alert`` is called for every failure a person must act on
        (``needs_alert``). ``sandbox_answer`` sends the sandbox header on
        every publish, to prove error paths against a sandbox workspace.
        ``trace_context`` returns the caller's current trace, sent with every
        publish that is not given one. ``max_workers`` bounds the threads of
        :meth:`send`: that many stories are sent at once.
        """
        self._url = _wire.workspace_base(url, workspace) + "/messages"
        if tokens is None:
            raise ValueError("a token source is required")
        self._tokens = tokens
        self._transport: Transport = transport if transport is not None else HTTPTransport()
        self._timeout = attempt_timeout
        self._retry = retry if retry is not None else RetryPolicy()
        self._outbox = outbox
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._jitter = jitter if jitter is not None else random.random
        self._on_alert = on_alert
        self._sandbox = sandbox_answer
        self._trace_context = trace_context
        self._max_workers = max_workers
        self._lock = threading.Lock()
        self._queues: dict[str, collections.deque[_Job]] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        # Snapshots refused with 409: message_id → (sha256 of the bytes, the
        # refusal), the least recently refused forgotten first.
        self._refused: collections.OrderedDict[str, tuple[bytes, StorybusError]] = collections.OrderedDict()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Waits for the messages handed to :meth:`send`, then stops the
        client's threads."""
        with self._lock:
            self._closed = True
            ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=True)

    # Publishing.

    def publish(
        self,
        message: Message,
        *,
        trace: TraceContext | None = None,
        sandbox_answer: str | None = None,
        timeout: float | None = None,
    ) -> PublishResult:
        """Sends ``message`` and returns its final success, or raises a
        :class:`~storybus_client.StorybusError`.

        It waits behind the earlier messages of the message's story that are
        still being sent, retries as the policy says, and keeps the message
        in the outbox when the retries are exhausted, when the credentials
        are refused, or when ``timeout`` (seconds for the whole publish, by
        the client's clock) ends before a final answer.
        """
        return self._in_turn(message.key, self._publisher(message, trace, sandbox_answer, timeout))

    def send(
        self,
        message: Message,
        *,
        trace: TraceContext | None = None,
        sandbox_answer: str | None = None,
        timeout: float | None = None,
    ) -> Future[PublishResult]:
        """Queues ``message`` behind the earlier messages of its story and
        publishes it on one of the client's threads, as :meth:`publish`
        does. Messages of one story are sent in the order they were handed
        over, each only once the one before has its final answer; other
        stories carry on meanwhile."""
        if self._closed:
            raise RuntimeError("the client is closed")
        job = _Job(self._publisher(message, trace, sandbox_answer, timeout))
        if self._enqueue(message.key, job):
            self._submit(message.key, job)
        return job.future

    def resend(self) -> list[ResendResult]:
        """Resends the outbox's pending messages, each story's in order, the
        story of the oldest first. A delivered message leaves the outbox; a
        refused one moves to its refused entries; after a temporary failure
        the story's later messages stay kept, behind it."""
        if self._outbox is None:
            raise ValueError("no outbox to resend")
        out: list[ResendResult] = []
        for key in self._outbox.keys():
            results, _ = self._in_turn(key, functools.partial(self._drain, key, None))
            out.extend(results)
        return out

    # A story's turns.

    def _in_turn(self, key: str, run: Callable[[], _T]) -> _T:
        """Runs ``run`` on the calling thread in the story's turn, and hands
        the story's next turn to a thread of the client."""
        job = _Job(run)
        if not self._enqueue(key, job):
            result: _T = job.future.result()
            return result
        job()
        following = self._next(key)
        if following is not None:
            self._submit(key, following)
        return job.future.result()  # type: ignore[no-any-return]

    def _enqueue(self, key: str, job: _Job) -> bool:
        """Takes a turn in the story's queue; reports whether it is this
        job's turn at once."""
        with self._lock:
            q = self._queues.get(key)
            if q is None:
                self._queues[key] = collections.deque()
                return True
            q.append(job)
            return False

    def _next(self, key: str) -> _Job | None:
        """Ends the story's current turn and returns the next, if any."""
        with self._lock:
            q = self._queues[key]
            if q:
                return q.popleft()
            del self._queues[key]
            return None

    def _submit(self, key: str, job: _Job) -> None:
        """Runs the story's turns from ``job`` on, on a thread of the client."""

        def drain() -> None:
            current: _Job | None = job
            while current is not None:
                current()
                current = self._next(key)

        with self._lock:
            if self._executor is None and not self._closed:
                self._executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix="storybus-send")
            executor = self._executor
            if executor is not None:
                executor.submit(drain)
                return
        # Closed: the story's waiting publishes still get their turns.
        drain()

    # One message.

    def _publisher(
        self,
        m: Message,
        trace: TraceContext | None,
        sandbox: str | None,
        timeout: float | None,
    ) -> Callable[[], PublishResult]:
        # The caller's trace and deadline are taken now, on the caller's
        # thread, not when the message's turn comes.
        if trace is None and self._trace_context is not None:
            trace = self._trace_context()
        deadline = None if timeout is None else self._clock.time() + timeout
        sandbox = sandbox if sandbox is not None else self._sandbox
        return lambda: self._publish_in_turn(m, trace, sandbox, deadline)

    def _publish_in_turn(
        self,
        m: Message,
        trace: TraceContext | None,
        sandbox: str | None,
        deadline: float | None,
    ) -> PublishResult:
        digest = hashlib.sha256(m.raw).digest()
        with self._lock:
            prev = self._refused.get(m.id)
        if prev is not None and prev[0] == digest:
            raise prev[1].replace(attempts=0, not_resent=True, kept=False, outbox_entry="")
        if self._outbox is not None and self._outbox.held(m.key):
            # The story has messages kept from before: they go first.
            _, blocked = self._drain(m.key, deadline)
            if blocked:
                held = HeldError(
                    message_id=m.id,
                    message_type=m.type,
                    snapshot=m.is_snapshot,
                    cause=RuntimeError("held behind an earlier message of its story kept in the outbox"),
                )
                raise self._keep(m, held)
        result, err = self._send(m, trace, sandbox, deadline)
        if err is None:
            assert result is not None
            return result
        if err.refused:
            self._refusal(m, err)
            raise err
        err = self._keep(m, err)
        self._alert(err)
        raise err

    def _refusal(self, m: Message, err: StorybusError) -> None:
        """Handles a final refusal: remembers a refused snapshot, alerts."""
        if err.status == 409 and m.is_snapshot and m.id:
            with self._lock:
                self._refused.pop(m.id, None)
                self._refused[m.id] = (hashlib.sha256(m.raw).digest(), err)
                while len(self._refused) > MAX_REFUSED:
                    self._refused.popitem(last=False)
        self._alert(err)

    def _alert(self, err: StorybusError) -> None:
        if err.needs_alert and self._on_alert is not None:
            self._on_alert(err)

    def _keep(self, m: Message, err: StorybusError) -> StorybusError:
        """Puts a message without a final answer in the outbox."""
        if self._outbox is None:
            return err
        # Kept before it is put, so that the entry's reason says it is.
        err.kept = True
        try:
            entry = self._outbox.put(m, err, self._clock.time())
        except Exception as exc:
            err.kept = False
            err.outbox_error = exc
            err.add_note(f"keeping it in the outbox failed: {exc}")
            return err
        err.outbox_entry = entry.id
        return err

    def _send(
        self,
        m: Message,
        trace: TraceContext | None,
        sandbox: str | None,
        deadline: float | None,
    ) -> tuple[PublishResult | None, StorybusError | None]:
        """Runs the attempts for one message until a final answer, or until
        the retries are exhausted."""
        refreshed = False
        retries = 0  # retryable failures so far
        sends = 0

        def fail(e: StorybusError) -> tuple[None, StorybusError]:
            e.message_id, e.message_type, e.attempts, e.snapshot = m.id, m.type, sends, m.is_snapshot
            return None, e

        while True:
            token = ""
            err: StorybusError
            try:
                token = self._tokens.token()
            except StorybusError as exc:
                err = exc
            except OSError as exc:
                err = _wire.no_answer(exc)
            else:
                sends += 1
                timeout = self._timeout
                if deadline is not None:
                    timeout = max(min(timeout, deadline - self._clock.time()), 0.001)
                try:
                    res = self._transport(self._request(m, token, trace, sandbox), timeout)
                except OSError as exc:
                    err = _wire.no_answer(exc)
                else:
                    if 200 <= res.status < 300:
                        a = _wire.parse_json(res.body)
                        family = a.get("family")
                        return PublishResult(
                            message_id=m.id,
                            message_type=m.type,
                            family=family if isinstance(family, str) else "",
                            status=res.status,
                            duplicate=a.get("duplicate") is True,
                            tolerated=_wire.violations(a.get("tolerated")),
                            attempts=sends,
                        ), None
                    err = _wire.failure(res, self._clock.time())
            if err.status == 401 and not refreshed and token:
                # Once, with a fresh token, at once.
                self._tokens.invalidate(token)
                refreshed = True
                log.debug("publish %s: 401 %s, once more with a fresh token", m.id, err.rule)
                continue
            if err.status == 401 or not err.temporary:
                return fail(err)
            retries += 1
            if retries >= self._retry.attempts:
                return fail(err)
            if err.retry_after > self._retry.max_retry_after:
                return fail(err)
            wait = max(self._retry.backoff(retries, self._jitter()), err.retry_after)
            if deadline is not None and self._clock.time() + wait > deadline:
                return fail(err)
            log.debug("publish %s: %s; retry %d in %.2f s", m.id, err, retries, wait)
            self._clock.sleep(wait)

    def _request(self, m: Message, token: str, trace: TraceContext | None, sandbox: str | None) -> Request:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Authorization": "Bearer " + token,
            "User-Agent": _wire.USER_AGENT,
        }
        if sandbox:
            headers[SANDBOX_HEADER] = sandbox
        if trace is not None:
            # The caller's trace continues through the bus to the consumers.
            headers.update(trace.headers())
        return Request("POST", self._url, headers, m.raw)

    # The outbox.

    def _drain(self, key: str, deadline: float | None) -> tuple[list[ResendResult], bool]:
        """Resends one story's pending entries in order, in the story's
        turn, and reports whether entries remain pending."""
        assert self._outbox is not None
        out: list[ResendResult] = []
        entries = self._outbox.pending(key)
        for i, entry in enumerate(entries):
            try:
                m = Message(entry.message)
            except ValueError as exc:
                # Kept bytes that are not a JSON object cannot be sent.
                moved = self._outbox.refuse(entry, BadRequestError(message_id=entry.message_id, text=str(exc)))
                out.append(ResendResult(entry=moved, error=exc))
                continue
            result, err = self._send(m, None, None, deadline)
            if err is None:
                self._outbox.remove(entry.id)
                out.append(ResendResult(entry=entry, result=result))
            elif err.refused:
                self._refusal(m, err)
                moved = self._outbox.refuse(entry, err)
                out.append(ResendResult(entry=moved, error=err))
            else:
                err.kept, err.outbox_entry = True, entry.id
                self._outbox.update(entry, err)
                self._alert(err)
                out.append(ResendResult(entry=entry, error=err))
                for later in entries[i + 1 :]:
                    held = HeldError(
                        message_id=later.message_id,
                        message_type=later.message_type,
                        kept=True,
                        outbox_entry=later.id,
                        cause=RuntimeError("held behind an earlier message of its story kept in the outbox"),
                    )
                    out.append(ResendResult(entry=later, error=held))
                return out, True
        return out, False
