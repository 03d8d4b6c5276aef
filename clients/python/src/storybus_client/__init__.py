"""storybus_client: the Python client of the storybus publish and consumer
APIs, standard library only.

It implements the retry discipline of the bus's documentation for
producers, so that a newsroom system loses no message and never sends two
messages about one change:

- a :class:`Message` is built once and every retry sends the identical bytes;
- only timeouts, network errors, 408, 429 (honouring Retry-After) and 5xx
  are retried, with exponential backoff and jitter (0.5 s, 1 s, 2 s … capped
  at 30 s), for a bounded number of attempts that covers at least 30 s
  (:class:`RetryPolicy`);
- a 401 is retried once with a fresh token (:class:`ClientCredentials`);
- 400, 403, 409 and 413 are never retried (:class:`RefusedError`), and a
  snapshot refused with 409 is never sent again;
- while one of a story's messages is retried, the story's next messages
  wait; other stories carry on (:meth:`Client.send`);
- a message whose retries are exhausted is kept, unchanged, in an
  :class:`Outbox` (:class:`FileOutbox` on disk), and resent later in story
  order (:meth:`Client.resend`).

Consumers pull with :class:`Consumer`, which acknowledges explicitly and
drops the duplicates of at-least-once delivery by message_id
(:class:`Dedup`).

:class:`AsyncClient` publishes from asyncio code, with the same discipline.
"""

from . import rules
from .aio import AsyncClient
from .client import SANDBOX_HEADER, SANDBOX_LOST, Client, PublishResult, ResendResult
from .clock import Clock, SystemClock
from .consumer import Consumer, Delivery, Handler
from .dedup import DEFAULT_DEDUP_SIZE, DEFAULT_DEDUP_WINDOW, Dedup
from .errors import (
    AuthenticationError,
    BadRequestError,
    CertificateError,
    ConflictError,
    ErrorClass,
    HeldError,
    NoAnswerError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    RefusedError,
    ServerError,
    StorybusError,
    TemporaryError,
    Violation,
    error_for_status,
)
from .message import SNAPSHOT_TYPE, Message
from .outbox import Entry, FileOutbox, Outbox
from .retry import MIN_RETRY_WINDOW, RetryPolicy
from .tokens import ClientCredentials, StaticToken, TokenResponse, TokenSource
from .trace import TraceContext
from .transport import MAX_ANSWER_BYTES, HTTPTransport, Request, Response, Transport, tls_context

__version__ = "0.1.0"

__all__ = [
    "rules",
    "Client",
    "AsyncClient",
    "PublishResult",
    "ResendResult",
    "SANDBOX_HEADER",
    "SANDBOX_LOST",
    "Clock",
    "SystemClock",
    "Consumer",
    "Delivery",
    "Handler",
    "Dedup",
    "DEFAULT_DEDUP_SIZE",
    "DEFAULT_DEDUP_WINDOW",
    "StorybusError",
    "RefusedError",
    "BadRequestError",
    "PermissionDeniedError",
    "ConflictError",
    "PayloadTooLargeError",
    "AuthenticationError",
    "TemporaryError",
    "RateLimitedError",
    "ServerError",
    "NoAnswerError",
    "HeldError",
    "CertificateError",
    "ErrorClass",
    "Violation",
    "error_for_status",
    "Message",
    "SNAPSHOT_TYPE",
    "Entry",
    "Outbox",
    "FileOutbox",
    "RetryPolicy",
    "MIN_RETRY_WINDOW",
    "TokenSource",
    "TokenResponse",
    "ClientCredentials",
    "StaticToken",
    "TraceContext",
    "Transport",
    "HTTPTransport",
    "Request",
    "Response",
    "tls_context",
    "MAX_ANSWER_BYTES",
]
