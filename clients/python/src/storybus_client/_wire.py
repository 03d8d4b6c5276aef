"""The bus's routes and answers, shared by the publisher, the token source
and the consumer."""

from __future__ import annotations

import email.utils
import json
import ssl
import urllib.parse
from typing import Any

from .errors import CertificateError, NoAnswerError, StorybusError, Violation, error_for_status
from .transport import Response

USER_AGENT = "storybus-client-python/0.1"


def workspace_base(url: str, workspace: str) -> str:
    """Returns the base of a workspace's routes, ``…/v1/tenants/{t}``, or
    raises ValueError for a URL that is not http(s)."""
    if not url or not workspace:
        raise ValueError("the bus URL and the workspace are required")
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise ValueError(f"bus URL {url!r} is not an http(s) URL")
    return url.rstrip("/") + "/v1/tenants/" + urllib.parse.quote(workspace, safe="")


def parse_json(body: bytes) -> dict[str, Any]:
    """Returns the answer's JSON object; an answer that is not one (a
    proxy's error page) is judged by its status alone."""
    try:
        v = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {}
    return v if isinstance(v, dict) else {}


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def violations(v: Any) -> tuple[Violation, ...]:
    """Reads an answer's violations or tolerated list."""
    if not isinstance(v, list):
        return ()
    return tuple(Violation.from_json(x) for x in v)


def failure(res: Response, now: float) -> StorybusError:
    """Turns an answer that is not a success into the error of its class."""
    a = parse_json(res.body)
    vs = violations(a.get("violations"))
    oauth2 = _str(a.get("error"))
    text = _str(a.get("error_description")) if oauth2 else _str(a.get("message"))
    rule = vs[0].rule if vs else _str(a.get("rule"))
    return error_for_status(
        res.status,
        oauth2=oauth2,
        rule=rule,
        violations=vs,
        text=text,
        retry_after=retry_after(res.header("Retry-After"), now),
        request_id=res.header("X-Request-Id"),
    )


def no_answer(exc: BaseException) -> StorybusError:
    """The error of an exchange that got no answer: a certificate the
    client does not trust is configuration, the rest is temporary."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return CertificateError(cause=exc)
    return NoAnswerError(cause=exc)


def retry_after(value: str, now: float) -> float:
    """Reads Retry-After, in seconds or as an HTTP date; 0 when absent or
    unreadable."""
    v = value.strip()
    if not v:
        return 0.0
    if v.isdigit():
        return float(int(v))
    try:
        t = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return 0.0
    if t.tzinfo is None:
        return 0.0
    return max(t.timestamp() - now, 0.0)
