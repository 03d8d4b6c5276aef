"""The HTTP transport: the one place the client touches the network.

A transport is any callable that takes a :class:`Request` and a timeout and
returns a :class:`Response`, or raises :class:`OSError` when there was no
answer (a timeout is :class:`TimeoutError`, a cut connection
:class:`ConnectionError`). Tests wrap :class:`HTTPTransport` to add headers,
count requests and record bodies; a program can wrap it to add a proxy's
headers or its own logging.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Request", "Response", "Transport", "HTTPTransport", "tls_context", "MAX_ANSWER_BYTES"]

#: The most bytes of an answer the transport reads: a pull of 100 messages
#: of 240,000 bytes fits.
MAX_ANSWER_BYTES = 32 << 20


@dataclass(frozen=True)
class Request:
    """One HTTP request."""

    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None


@dataclass(frozen=True)
class Response:
    """One HTTP answer. ``headers`` has lower-case names; a header sent more
    than once is joined with ", "."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def header(self, name: str) -> str:
        """Returns the header's value, "" when it is absent."""
        return self.headers.get(name.lower(), "")


class Transport(Protocol):
    """Sends one request and returns its answer, whatever the status."""

    def __call__(self, request: Request, timeout: float) -> Response:
        """Sends ``request`` and returns the answer within ``timeout``
        seconds; raises :class:`OSError` when there was none."""
        ...


def tls_context(
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> ssl.SSLContext:
    """Returns an :class:`ssl.SSLContext` for the bus, to pass to
    :class:`HTTPTransport`.

    ``ca_file`` holds the certificates of the authorities the bus's
    certificate is checked against, instead of the system's roots (as curl's
    ``--cacert``); without it, the system's roots, which OpenSSL reads from
    ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` when they are set. ``cert_file``
    and ``key_file`` are the client's certificate and key, for a bus that
    takes mutual TLS: both or neither. TLS 1.2 at least.
    """
    if (cert_file is None) != (key_file is None):
        raise ValueError("a client certificate needs both its certificate and key files")
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None and key_file is not None:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


_Conn = http.client.HTTPConnection


class HTTPTransport:
    """The default transport, on :mod:`http.client`.

    It keeps idle connections for reuse (at most ``max_idle`` per host, each
    for at most ``idle_timeout`` seconds, well under the bus's two minutes)
    and never sends a request twice: a request whose connection fails is a
    failed attempt, which the client retries with its own discipline. The
    timeout bounds the whole exchange, connecting and reading included.
    It is safe for concurrent use.
    """

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        *,
        max_idle: int = 8,
        idle_timeout: float = 30.0,
    ) -> None:
        self._ssl = ssl_context
        self._max_idle = max_idle
        self._idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str, int], list[tuple[_Conn, float]]] = {}

    def __call__(self, request: Request, timeout: float) -> Response:
        """Sends the request; see :class:`Transport`."""
        u = urllib.parse.urlsplit(request.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {request.url!r}")
        key = (u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80))
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        deadline = time.monotonic() + timeout
        conn = self._take(key, timeout)
        try:
            conn.request(request.method, target, body=request.body, headers=dict(request.headers))
            _bound(conn, deadline)
            res = conn.getresponse()
            body, whole = _read(res, conn, deadline)
            headers: dict[str, str] = {}
            for name, value in res.getheaders():
                n = name.lower()
                headers[n] = f"{headers[n]}, {value}" if n in headers else value
            reusable = whole and not res.will_close
        except ssl.SSLCertVerificationError:
            conn.close()
            raise
        except http.client.HTTPException as exc:
            conn.close()
            if isinstance(exc, OSError):
                raise
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        if reusable:
            self._give(key, conn)
        else:
            conn.close()
        return Response(status=res.status, headers=headers, body=body)

    def close(self) -> None:
        """Closes the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn, _ in conns:
                conn.close()

    def _take(self, key: tuple[str, str, int], timeout: float) -> _Conn:
        now = time.monotonic()
        with self._lock:
            conns = self._idle.get(key, [])
            while conns:
                conn, since = conns.pop()
                if now - since < self._idle_timeout:
                    conn.timeout = timeout
                    if conn.sock is not None:
                        conn.sock.settimeout(timeout)
                    return conn
                conn.close()
        scheme, host, port = key
        if scheme == "https":
            ctx = self._ssl if self._ssl is not None else ssl.create_default_context()
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def _give(self, key: tuple[str, str, int], conn: _Conn) -> None:
        with self._lock:
            conns = self._idle.setdefault(key, [])
            if len(conns) < self._max_idle:
                conns.append((conn, time.monotonic()))
                return
        conn.close()


def _bound(conn: _Conn, deadline: float) -> None:
    """Gives the connection's next reads what is left of the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    if conn.sock is not None:
        conn.sock.settimeout(left)


def _read(res: http.client.HTTPResponse, conn: _Conn, deadline: float) -> tuple[bytes, bool]:
    """Reads the answer's body, up to MAX_ANSWER_BYTES, before the deadline,
    and reports whether it was read whole. A longer body is cut there (and
    is then not JSON)."""
    chunks: list[bytes] = []
    size = 0
    while size < MAX_ANSWER_BYTES:
        _bound(conn, deadline)
        chunk = res.read(min(65536, MAX_ANSWER_BYTES - size))
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    res.close()
    return b"".join(chunks), False
