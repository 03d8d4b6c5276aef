"""The exceptions of the client: one class per kind of answer.

Every failure of a publish, a token request or a consumer request is a
:class:`StorybusError`. Catch the subclass that says what to do
(:class:`RefusedError`: never resend it unchanged; :class:`TemporaryError`:
a later resend can succeed; :class:`AuthenticationError`: configuration)
and branch on ``status`` and ``rule``, never on the text of a violation.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from . import rules

__all__ = [
    "Violation",
    "ErrorClass",
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
    "error_for_status",
]

_E = TypeVar("_E", bound="StorybusError")


@dataclass(frozen=True)
class Violation:
    """One entry of an answer's ``violations`` or ``tolerated`` list."""

    #: ``schema``, ``conformance``, ``sequence`` or ``policy``.
    source: str
    #: A stable id: branch on it.
    rule: str
    #: For people, and may change: never parse it.
    message: str = ""
    #: A JSON Pointer into the message, where the bus can say where.
    path: str = ""

    @classmethod
    def from_json(cls, v: Any) -> Violation:
        """Reads one violation of an answer; members of other types are empty."""
        if not isinstance(v, dict):
            return cls(source="", rule="")

        def s(name: str) -> str:
            x = v.get(name)
            return x if isinstance(x, str) else ""

        return cls(source=s("source"), rule=s("rule"), message=s("message"), path=s("path"))


class ErrorClass(enum.StrEnum):
    """The class of a failure in the terms a newsroom user sees (the
    documentation's "Show it to people")."""

    #: Success, or an unclassified failure.
    NONE = "none"
    #: 400 and 413, or a reused message_id: a bug in the producing product.
    INVALID = "invalid"
    #: 401 after a fresh token, 403, a connection that may not get tokens,
    #: or a story owned by another system: for an administrator.
    NOT_ALLOWED = "not-allowed"
    #: A snapshot refused as stale, contended or superseded.
    STORY_CHANGED = "story-changed"
    #: A snapshot of a killed story.
    STORY_KILLED = "story-killed"
    #: Retries exhausted (timeouts, network errors, 429, 5xx); the message is
    #: kept for a later resend.
    NOT_DELIVERED = "not-delivered"


class StorybusError(Exception):
    """A publish, token or consumer request that did not succeed.

    It carries the bus's answer (``status``, ``rule``, ``violations``) or,
    when there was no answer, the cause (``cause``, also ``__cause__``).
    """

    #: The HTTP status of the last answer; 0 when there was none.
    status: int
    #: The first violation's rule, or the token endpoint's ``rule``; "" when
    #: the answer had none.
    rule: str
    #: Every violation of the answer.
    violations: tuple[Violation, ...]
    #: The ``message`` of an answer in API Gateway's ``{"message": "…"}``
    #: shape, or the token endpoint's ``error_description``: for people.
    text: str
    #: The token endpoint's OAuth2 error code (``invalid_client``,
    #: ``unauthorized_client``, …).
    oauth2: str
    #: The answer's Retry-After, in seconds; 0 when it had none.
    retry_after: float
    #: The answer's X-Request-Id: quote it to the bus's operators.
    request_id: str
    #: The message this error is about, for a publish.
    message_id: str
    message_type: str
    #: How many times the message was sent by this call.
    attempts: int
    #: Set when the message is in the outbox, unchanged, under ``outbox_entry``.
    kept: bool
    outbox_entry: str
    #: Set when the client refused to send a snapshot again because the bus
    #: had refused it with 409.
    not_resent: bool
    #: The cause when there was no final answer: the network error, a
    #: timeout, or why the message was held.
    cause: BaseException | None
    #: Set when keeping the message in the outbox failed.
    outbox_error: BaseException | None

    def __init__(
        self,
        *,
        status: int = 0,
        rule: str = "",
        violations: Sequence[Violation] = (),
        text: str = "",
        oauth2: str = "",
        retry_after: float = 0.0,
        request_id: str = "",
        message_id: str = "",
        message_type: str = "",
        attempts: int = 0,
        kept: bool = False,
        outbox_entry: str = "",
        not_resent: bool = False,
        cause: BaseException | None = None,
        snapshot: bool = False,
    ) -> None:
        super().__init__()
        self.status = status
        self.violations = tuple(violations)
        self.rule = rule or (self.violations[0].rule if self.violations else "")
        self.text = text
        self.oauth2 = oauth2
        self.retry_after = retry_after
        self.request_id = request_id
        self.message_id = message_id
        self.message_type = message_type
        self.attempts = attempts
        self.kept = kept
        self.outbox_entry = outbox_entry
        self.not_resent = not_resent
        self.cause = cause
        self.outbox_error = None
        self.snapshot = snapshot
        if cause is not None:
            self.__cause__ = cause

    #: Whether the message is a story.context snapshot.
    snapshot: bool

    @property
    def path(self) -> str:
        """The first violation's path, "" when it has none."""
        return self.violations[0].path if self.violations else ""

    def __str__(self) -> str:
        parts: list[str] = []
        if self.message_id:
            parts.append(f"message {self.message_id}: ")
        if self.status:
            parts.append(str(self.status))
            if self.rule:
                parts.append(" " + self.rule)
            if self.oauth2:
                parts.append(f" (OAuth2 {self.oauth2})")
            if self.path:
                parts.append(" at " + self.path)
            if self.text:
                parts.append(" " + _quote(self.text))
        elif self.cause is not None:
            parts.append(_one_line(self.cause))
        else:
            parts.append("failed")
        if self.attempts > 1:
            parts.append(f" after {self.attempts} attempts")
        if advice := self.advice:
            parts.append(": " + advice)
        return "".join(parts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.__dict__))

    def replace(self: _E, **changes: Any) -> _E:
        """Returns a copy of the error with some attributes changed."""
        new = type(self).__new__(type(self))
        Exception.__init__(new)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        new.__cause__ = new.cause
        return new

    @property
    def refused(self) -> bool:
        """Whether the bus gave a final verdict against this message:
        resending it unchanged cannot help (400, 403, 409, 413 and every
        other 4xx but 401, 408 and 429)."""
        return 400 <= self.status < 500 and not _retryable_status(self.status) and self.status != 401

    @property
    def temporary(self) -> bool:
        """Whether a later resend can fix the failure: no answer, 408, 429
        or 5xx."""
        return (self.status == 0 and self.cause is not None) or _retryable_status(self.status)

    @property
    def rebuild(self) -> bool:
        """Whether the answer asks for a new snapshot, built from the
        story's current state with the next sequence_number and a new
        message_id: a snapshot refused with 409 sequence.stale or
        commit.contention."""
        return (
            self.status == 409
            and self.snapshot
            and self.rule in (rules.SEQUENCE_STALE, rules.COMMIT_CONTENTION)
        )

    @property
    def needs_alert(self) -> bool:
        """Whether a person must act: a bug in the producing product (400,
        413, a reused message_id) or configuration (a 401 after a fresh
        token, 403)."""
        if self.status in (400, 401, 403, 413):
            return True
        return self.status == 409 and self.rule == rules.MESSAGE_ID_REUSED

    @property
    def advice(self) -> str:
        """What the producer should do next, for logs."""
        s, r = self.status, self.rule
        if self.oauth2 == rules.OAUTH2_UNAUTHORIZED_CLIENT:
            return "configuration: the connection may not get tokens; alert an administrator"
        if self.oauth2 and s == 400:
            return "a bug in the token request: the bus refuses it"
        if self.oauth2 and s == 401:
            return "configuration: the client id or secret is not accepted; stop and alert"
        if s == 409 and self.snapshot:
            done = "it was refused before and was not sent again" if self.not_resent else "it is not resent"
            return done + "; " + {
                rules.SEQUENCE_TERMINAL: "the story is killed and stays killed: tell the user",
                rules.STORY_NOT_OWNER: "publish from the story's owner or ask a workspace admin for a hand-off",
                rules.MESSAGE_ID_REUSED: "a bug: every new message needs a new message_id",
                rules.SUPERSEDED: "a newer snapshot supersedes it: for a change, rebuild a complete "
                "snapshot from current state with a new message_id",
            }.get(r, "rebuild a complete snapshot from current state, with the next sequence_number and a new message_id")
        if s == 409 and r == rules.MESSAGE_ID_REUSED:
            return "a bug: every new message needs a new message_id; it is not resent"
        if s == 409:
            return "refused for this message; it is not resent"
        if s == 400:
            return "a bug in the producing product: fix the message at the rule's path; it is not resent unchanged"
        if s == 413:
            return "send content by reference: move media and long text out; it is not resent"
        if s == 401:
            return "configuration: refused even with a fresh token; stop and alert"
        if s == 403 and r == rules.REQUEST_BLOCKED:
            return "refused by the workspace firewall: check what the client sends"
        if s == 403:
            return "configuration: alert an administrator"
        if self.temporary:
            if self.kept:
                return "not delivered yet; kept in the outbox for a later resend"
            if self.message_id:
                return "not delivered yet, and not kept: no outbox"
            return "temporary: retry later"
        if self.refused:
            return "refused; it is not resent"
        return ""

    @property
    def error_class(self) -> ErrorClass:
        """The failure's user-facing class."""
        s, r = self.status, self.rule
        if self.oauth2 == rules.OAUTH2_UNAUTHORIZED_CLIENT:
            return ErrorClass.NOT_ALLOWED
        if s in (400, 413):
            return ErrorClass.INVALID
        if s in (401, 403):
            return ErrorClass.NOT_ALLOWED
        if s == 409:
            if r in (rules.SEQUENCE_STALE, rules.COMMIT_CONTENTION, rules.SUPERSEDED):
                return ErrorClass.STORY_CHANGED
            if r == rules.SEQUENCE_TERMINAL:
                return ErrorClass.STORY_KILLED
            if r == rules.MESSAGE_ID_REUSED:
                return ErrorClass.INVALID
            return ErrorClass.NOT_ALLOWED
        if self.temporary:
            return ErrorClass.NOT_DELIVERED
        if self.refused:
            return ErrorClass.INVALID
        return ErrorClass.NONE

    @property
    def user_message(self) -> str:
        """What a newsroom user should read, never a status code: the
        documentation's sentence for the class, pointing at the field for an
        invalid message."""
        c = self.error_class
        if c is ErrorClass.INVALID:
            if self.status == 413:
                return "This story couldn't be shared with other systems: it is too large."
            field = _field_name(self.path) if self.path else "the message"
            return f"This story couldn't be shared with other systems: {field} is invalid."
        return {
            ErrorClass.NOT_ALLOWED: "This system isn't allowed to publish that.",
            ErrorClass.STORY_CHANGED: "Someone else changed this story.",
            ErrorClass.STORY_KILLED: "This story was killed and can't be reopened.",
            ErrorClass.NOT_DELIVERED: "Other systems haven't received the latest version yet. Retrying.",
        }.get(c, "")

    def has_rule(self, rule: str) -> bool:
        """Whether any violation of the answer is ``rule``."""
        return any(v.rule == rule for v in self.violations) or self.rule == rule


class RefusedError(StorybusError):
    """A final verdict of the bus against the message (400, 403, 409, 413
    and every other 4xx but 401, 408 and 429): never resend it unchanged.
    It is never kept in the outbox."""


class BadRequestError(RefusedError):
    """400: not valid SOM, or not JSON. A bug in the producing product: log
    ``rule`` and ``path``, and alert."""


class PermissionDeniedError(RefusedError):
    """403 (a grant, an inactive connection, the firewall), or the token
    endpoint's 400 ``unauthorized_client``: configuration, alert an
    administrator."""


class ConflictError(RefusedError):
    """409: the message breaks its story (``sequence.stale``,
    ``sequence.terminal``, ``commit.contention``, ``story.not_owner``,
    ``message.superseded``) or reuses a message_id. See ``rebuild``."""


class PayloadTooLargeError(RefusedError):
    """413: over 240,000 bytes; send content by reference."""


class AuthenticationError(StorybusError):
    """401 even with a fresh token, or the token endpoint's 401
    ``invalid_client``: configuration, stop and alert. The bus never judged
    the message, so a publish keeps it in the outbox."""


class TemporaryError(StorybusError):
    """No final answer: a later resend can succeed (no answer, 408, 429,
    5xx). Raised once the retries are exhausted; the message is kept in the
    outbox when there is one (``kept``)."""


class RateLimitedError(TemporaryError):
    """429 ``rate.limited`` or ``quota.exceeded``; ``retry_after`` says how
    long to wait."""


class ServerError(TemporaryError):
    """5xx: ``bus.publish_failed``, ``registry.unavailable``,
    ``message.in_flight``, or a proxy's error page."""


class NoAnswerError(TemporaryError):
    """No answer the client could read: a timeout, a network error or a cut
    connection (``cause``). Whether the bus got the message is unknown; a
    resend of the same bytes is answered 200 duplicate if it did."""


class HeldError(TemporaryError):
    """The message was not sent because an earlier message of its story is
    kept in the outbox and could not be delivered first: it is kept behind
    that one, in order."""


class CertificateError(StorybusError):
    """The bus's TLS certificate is not trusted: configuration (a CA file, a
    host name), not retried. The bus never saw the message, so a publish
    keeps it in the outbox."""

    @property
    def temporary(self) -> bool:
        """Never: resending cannot help until the configuration is fixed."""
        return False

    @property
    def needs_alert(self) -> bool:
        """Always: a person must fix the TLS configuration."""
        return True

    @property
    def advice(self) -> str:
        """Says to fix the TLS configuration."""
        kept = "; kept in the outbox for a later resend" if self.kept else ""
        return ("configuration: give the client the CA that signed the bus's certificate "
                "(tls_context(ca_file=…), SSL_CERT_FILE) or fix the certificate; not retried" + kept)

    @property
    def error_class(self) -> ErrorClass:
        """Not allowed: an administrator's to fix."""
        return ErrorClass.NOT_ALLOWED


def error_for_status(status: int, *, oauth2: str = "", **kwargs: Any) -> StorybusError:
    """Returns the error of the class that an answer with ``status`` (0: no
    answer) belongs to, with the other attributes from ``kwargs``."""
    cls: type[StorybusError]
    if oauth2 == rules.OAUTH2_UNAUTHORIZED_CLIENT:
        cls = PermissionDeniedError
    elif status == 0:
        cls = NoAnswerError
    elif status == 400:
        cls = BadRequestError
    elif status == 401:
        cls = AuthenticationError
    elif status == 403:
        cls = PermissionDeniedError
    elif status == 409:
        cls = ConflictError
    elif status == 413:
        cls = PayloadTooLargeError
    elif status == 429:
        cls = RateLimitedError
    elif status >= 500:
        cls = ServerError
    elif _retryable_status(status):
        cls = TemporaryError
    elif 400 <= status < 500:
        cls = RefusedError
    else:
        cls = StorybusError
    return cls(status=status, oauth2=oauth2, **kwargs)


def _restore(cls: type[StorybusError], state: dict[str, Any]) -> StorybusError:
    e = cls.__new__(cls)
    Exception.__init__(e)
    e.__dict__.update(state)
    return e


def _retryable_status(status: int) -> bool:
    """The statuses the client retries: 408 (a timeout), 429 and 5xx."""
    return status in (408, 429) or status >= 500


def _one_line(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text.replace("\n", ": ")


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _field_name(pointer: str) -> str:
    """Turns a JSON Pointer into a dotted field name."""
    tokens = pointer.removeprefix("/").split("/")
    return ".".join(t.replace("~1", "/").replace("~0", "~") for t in tokens)
