"""Bearer tokens: OAuth2 client credentials from the workspace's token
endpoint."""

from __future__ import annotations

import base64
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Protocol

from . import _wire
from .clock import Clock, SystemClock
from .errors import NoAnswerError
from .transport import HTTPTransport, Request, Transport

__all__ = ["TokenSource", "TokenResponse", "ClientCredentials", "StaticToken"]


class TokenSource(Protocol):
    """Gives the bearer tokens requests carry."""

    def token(self) -> str:
        """Returns a token, from a cache while it is fresh. Raises a
        :class:`~storybus_client.StorybusError` when none can be had."""
        ...

    def invalidate(self, token: str) -> None:
        """Drops ``token`` from the cache after the bus refused it with 401,
        so that the next :meth:`token` fetches a new one."""
        ...


@dataclass(frozen=True)
class TokenResponse:
    """The bus's OAuth2 client-credentials answer."""

    access_token: str
    token_type: str
    #: The token's lifetime in seconds.
    expires_in: int


class ClientCredentials:
    """A :class:`TokenSource` that gets tokens from the workspace's token
    endpoint, ``POST /v1/tenants/{t}/tokens``, with the OAuth2 client
    credentials grant, and keeps each until shortly before it expires.

    The client id and secret go in HTTP Basic credentials
    (``client_secret_basic``). Without a secret, the transport's TLS client
    certificate authenticates the connection (mutual TLS, see
    :func:`~storybus_client.tls_context`), ``client_id`` goes in the body, and
    the tokens are bound to that certificate. It is safe for concurrent use.
    """

    def __init__(
        self,
        url: str,
        workspace: str,
        client_id: str,
        client_secret: str | None = None,
        *,
        transport: Transport | None = None,
        timeout: float = 30.0,
        clock: Clock | None = None,
        leeway: float = 60.0,
    ) -> None:
        """``leeway`` is how long before its expiry a token is replaced,
        never more than half its lifetime; ``timeout`` bounds one token
        request."""
        if not client_id:
            raise ValueError("a client id is required")
        self._url = _wire.workspace_base(url, workspace) + "/tokens"
        self._client_id = client_id
        self._client_secret = client_secret or ""
        self._transport: Transport = transport if transport is not None else HTTPTransport()
        self._timeout = timeout
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._leeway = leeway
        self._lock = threading.Lock()
        self._token = ""
        self._refresh_at = 0.0

    def token(self) -> str:
        """Returns the cached token, or fetches a new one when there is
        none or it is about to expire. A refused request raises the error of
        its class with the answer's status, its OAuth2 error code and its
        rule (401 ``invalid_client`` ``auth.credentials.invalid``, 400
        ``unauthorized_client`` ``connection.inactive``)."""
        with self._lock:
            if self._token and self._clock.time() < self._refresh_at:
                return self._token
            tr = self.fetch()
            leeway = min(self._leeway, tr.expires_in / 2)
            self._token, self._refresh_at = tr.access_token, self._clock.time() + tr.expires_in - leeway
            return self._token

    def invalidate(self, token: str) -> None:
        """Drops ``token`` if it is the cached one."""
        with self._lock:
            if self._token == token:
                self._token = ""

    def fetch(self) -> TokenResponse:
        """Gets a new token, bypassing and not touching the cache."""
        form = {"grant_type": "client_credentials"}
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
            "User-Agent": _wire.USER_AGENT,
        }
        if self._client_secret:
            # RFC 6749 §2.3.1: each part form-encoded, then Basic.
            pair = urllib.parse.quote_plus(self._client_id) + ":" + urllib.parse.quote_plus(self._client_secret)
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form["client_id"] = self._client_id
        body = urllib.parse.urlencode(form).encode()
        try:
            res = self._transport(Request("POST", self._url, headers, body), self._timeout)
        except OSError as exc:
            raise _wire.no_answer(exc) from exc
        if not 200 <= res.status < 300:
            raise _wire.failure(res, self._clock.time())
        a = _wire.parse_json(res.body)
        access, kind, expires = a.get("access_token"), a.get("token_type"), a.get("expires_in")
        if (
            not isinstance(access, str)
            or not access
            or not isinstance(kind, str)
            or kind.lower() != "bearer"
            or isinstance(expires, bool)
            or not isinstance(expires, (int, float))
            or expires < 1
        ):
            raise NoAnswerError(cause=ValueError("the token endpoint's answer is not a bearer token with expires_in"))
        return TokenResponse(access_token=access, token_type=kind, expires_in=int(expires))


class StaticToken:
    """A :class:`TokenSource` that always gives the same token, for a token
    obtained elsewhere (``storybus token``). It cannot refresh."""

    def __init__(self, token: str) -> None:
        self._token = token

    def token(self) -> str:
        """Returns the token."""
        return self._token

    def invalidate(self, token: str) -> None:
        """Does nothing: a static token cannot be refreshed."""
