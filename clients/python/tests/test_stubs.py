"""Stub tests: what a real bus cannot be made to do (a proxy's HTML 502, an
answer that never comes, a Retry-After as a date, the token endpoint's
OAuth2 errors), against narrow HTTP stubs named as such."""

from __future__ import annotations

import email.utils
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from conftest import FakeClock
from storybus_client import (
    AuthenticationError,
    Client,
    ClientCredentials,
    Consumer,
    FileOutbox,
    HTTPTransport,
    Message,
    NoAnswerError,
    PermissionDeniedError,
    RateLimitedError,
    RetryPolicy,
    ServerError,
    StaticToken,
    TraceContext,
)


@dataclass
class Exchange:
    """One request the stub got."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Answer = Callable[[int, Exchange], tuple[int, dict[str, str], bytes] | None]


@dataclass
class Stub:
    """An HTTP stub of the bus: ``answer(n, exchange)`` gives the n-th
    publish's status, headers and body (None: hang up without answering);
    token requests get a token unless ``token`` says otherwise."""

    answer: Answer
    token: Callable[[int], tuple[int, bytes]] = lambda n: (200, json.dumps(
        {"access_token": f"token-{n}", "token_type": "Bearer", "expires_in": 3600}).encode())
    exchanges: list[Exchange] = field(default_factory=list)
    url: str = ""

    def publishes(self) -> list[Exchange]:
        return [e for e in self.exchanges if not e.path.endswith("/tokens")]

    def tokens(self) -> int:
        return sum(1 for e in self.exchanges if e.path.endswith("/tokens"))


@pytest.fixture
def stub() -> Iterator[Callable[..., Stub]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def make(answer: Answer, **kw: object) -> Stub:
        s = Stub(answer, **kw)  # type: ignore[arg-type]
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.do_POST()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ex = Exchange(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with lock:
                    s.exchanges.append(ex)
                    n = len(s.publishes()) - 1 if not self.path.endswith("/tokens") else s.tokens() - 1
                if self.path.endswith("/tokens"):
                    status, out = s.token(n)
                    headers = {"Content-Type": "application/json"}
                else:
                    got = s.answer(n, ex)
                    if got is None:
                        self.close_connection = True
                        return
                    status, headers, out = got
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
        s.url = f"http://127.0.0.1:{srv.server_address[1]}"
        return s

    yield make
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def accepted(message_id: str = "m") -> tuple[int, dict[str, str], bytes]:
    return 202, {"Content-Type": "application/json"}, json.dumps(
        {"accepted": True, "message_id": message_id, "message_type": "story.context", "family": "story-context",
         "tolerated": []}).encode()


def refusal(status: int, rule: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(
        {"accepted": False, "violations": [{"source": "policy", "rule": rule, "message": "stub"}]}).encode()


PROXY_502 = (502, {"Content-Type": "text/html"}, b"<html><body><h1>502 Bad Gateway</h1></body></html>")

MESSAGE = Message(b'{"som_version":"1.0","message_id":"7d0e5b4c-1f2a-4b3c-8d9e-0a1b2c3d4e5f","message_type":"story.context",'
                  b'"system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"stub-1","sequence_number":1,'
                  b'"state":"draft","headline":"h"}}')


def client_for(s: Stub, clock: FakeClock, **kw: object) -> Client:
    tokens = ClientCredentials(s.url, "newsroom", "cms", "secret", clock=clock)
    return Client(s.url, "newsroom", tokens, clock=clock, jitter=lambda: 0.0, **kw)  # type: ignore[arg-type]


def test_stub_a_proxys_html_502_is_judged_by_its_status_and_retried(stub: Callable[..., Stub]) -> None:
    s = stub(lambda n, ex: PROXY_502 if n < 2 else accepted())
    clock = FakeClock()
    with client_for(s, clock) as c:
        res = c.publish(MESSAGE)
    assert res.status == 202 and res.attempts == 3
    assert [e.body for e in s.publishes()] == [MESSAGE.raw] * 3
    assert clock.sleeps == [0.25, 0.5]


def test_stub_a_proxys_502_every_time_is_kept_with_its_status(stub: Callable[..., Stub], tmp_path: object) -> None:
    s = stub(lambda n, ex: PROXY_502)
    clock = FakeClock()
    outbox = FileOutbox(str(tmp_path))
    with client_for(s, clock, retry=RetryPolicy(attempts=3), outbox=outbox) as c:
        with pytest.raises(ServerError) as info:
            c.publish(MESSAGE)
    e = info.value
    assert (e.status, e.rule, e.attempts, e.kept) == (502, "", 3, True)
    assert [x.message for x in outbox.list_pending()] == [MESSAGE.raw]


def test_stub_an_attempt_that_times_out_is_retried_with_the_same_bytes(stub: Callable[..., Stub]) -> None:
    release = threading.Event()

    def answer(n: int, ex: Exchange) -> tuple[int, dict[str, str], bytes]:
        if n == 0:
            release.wait(10)  # longer than the attempt timeout
        return accepted()

    s = stub(answer)
    clock = FakeClock()
    with client_for(s, clock, attempt_timeout=0.3) as c:
        started = time.monotonic()
        res = c.publish(MESSAGE)
        release.set()
    assert res.status == 202 and res.attempts == 2
    assert time.monotonic() - started < 5
    assert [e.body for e in s.publishes()] == [MESSAGE.raw] * 2


def test_stub_an_answer_never_given_is_no_answer(stub: Callable[..., Stub]) -> None:
    s = stub(lambda n, ex: None)
    with client_for(s, FakeClock(), retry=RetryPolicy(attempts=2)) as c:
        with pytest.raises(NoAnswerError) as info:
            c.publish(MESSAGE)
    assert info.value.attempts == 2 and isinstance(info.value.cause, ConnectionError)
    assert "not kept: no outbox" in str(info.value)


def test_stub_a_retry_after_date_is_honoured(stub: Callable[..., Stub]) -> None:
    clock = FakeClock(1_800_000_000.0)
    when = email.utils.formatdate(clock.time() + 7, usegmt=True)
    s = stub(lambda n, ex: refusal(429, "rate.limited", {"Retry-After": when}) if n == 0 else accepted())
    with client_for(s, clock) as c:
        assert c.publish(MESSAGE).attempts == 2
    assert clock.sleeps == [7.0]


def test_stub_a_retry_after_past_the_limit_keeps_the_message_at_once(stub: Callable[..., Stub], tmp_path: object) -> None:
    s = stub(lambda n, ex: refusal(429, "quota.exceeded", {"Retry-After": "43200"}))
    clock = FakeClock()
    outbox = FileOutbox(str(tmp_path))
    with client_for(s, clock, outbox=outbox) as c:
        with pytest.raises(RateLimitedError) as info:
            c.publish(MESSAGE)
    assert info.value.retry_after == 43200 and info.value.kept and info.value.attempts == 1
    assert clock.sleeps == []
    assert len(outbox.list_pending()) == 1


def test_stub_the_publish_timeout_ends_the_retries_and_keeps_the_message(stub: Callable[..., Stub], tmp_path: object) -> None:
    s = stub(lambda n, ex: refusal(503, "message.in_flight", {"Retry-After": "30"}))
    clock = FakeClock()
    outbox = FileOutbox(str(tmp_path))
    with client_for(s, clock, outbox=outbox) as c:
        with pytest.raises(ServerError) as info:
            c.publish(MESSAGE, timeout=45)
    # 30 s waited once; a second 30 s would pass the 45 s.
    assert clock.sleeps == [30.0] and info.value.attempts == 2 and info.value.kept


def test_stub_a_token_endpoint_that_is_unavailable_is_retried(stub: Callable[..., Stub]) -> None:
    def token(n: int) -> tuple[int, bytes]:
        if n == 0:
            return 503, json.dumps({"error": "temporarily_unavailable", "rule": "registry.unavailable"}).encode()
        return 200, json.dumps({"access_token": "t", "token_type": "bearer", "expires_in": 60}).encode()

    s = stub(lambda n, ex: accepted(), token=token)
    clock = FakeClock()
    with client_for(s, clock) as c:
        res = c.publish(MESSAGE)
    assert res.attempts == 1 and s.tokens() == 2 and len(clock.sleeps) == 1
    assert s.publishes()[0].headers["authorization"] == "Bearer t"


def test_stub_a_refused_secret_is_an_authentication_error_with_its_oauth2_code(stub: Callable[..., Stub]) -> None:
    s = stub(lambda n, ex: accepted(), token=lambda n: (401, json.dumps(
        {"error": "invalid_client", "error_description": "unknown client or bad secret",
         "rule": "auth.credentials.invalid"}).encode()))
    with client_for(s, FakeClock()) as c:
        with pytest.raises(AuthenticationError) as info:
            c.publish(MESSAGE)
    e = info.value
    assert (e.status, e.oauth2, e.rule, e.text, e.attempts) == (401, "invalid_client", "auth.credentials.invalid",
                                                               "unknown client or bad secret", 0)
    assert s.tokens() == 1 and s.publishes() == []
    token = s.exchanges[0]
    assert token.headers["authorization"] == "Basic Y21zOnNlY3JldA=="  # cms:secret
    assert token.body == b"grant_type=client_credentials"


def test_stub_an_inactive_connection_at_the_token_endpoint_is_permission_denied(stub: Callable[..., Stub]) -> None:
    s = stub(lambda n, ex: accepted(), token=lambda n: (400, json.dumps(
        {"error": "unauthorized_client", "rule": "connection.inactive"}).encode()))
    tokens = ClientCredentials(s.url, "newsroom", "cms", "secret")
    with pytest.raises(PermissionDeniedError) as info:
        tokens.token()
    assert info.value.rule == "connection.inactive" and info.value.error_class == "not-allowed"


def test_stub_tokens_are_cached_until_shortly_before_they_expire(stub: Callable[..., Stub]) -> None:
    s = stub(lambda n, ex: accepted())
    clock = FakeClock()
    tokens = ClientCredentials(s.url, "newsroom", "cms", "secret", clock=clock)
    assert tokens.token() == "token-0" and tokens.token() == "token-0"
    clock.advance(3600 - 61)
    assert tokens.token() == "token-0"
    clock.advance(2)  # within the minute before expiry
    assert tokens.token() == "token-1"
    tokens.invalidate("token-0")  # not the cached one: nothing happens
    assert tokens.token() == "token-1"
    tokens.invalidate("token-1")
    assert tokens.token() == "token-2"


def test_stub_without_a_secret_the_client_id_goes_in_the_body(stub: Callable[..., Stub]) -> None:
    s = stub(lambda n, ex: accepted())
    ClientCredentials(s.url, "newsroom", "cms").token()
    assert "authorization" not in s.exchanges[0].headers
    assert s.exchanges[0].body == b"grant_type=client_credentials&client_id=cms"


def test_stub_an_api_gateway_403_keeps_its_text(stub: Callable[..., Stub]) -> None:
    s = stub(lambda n, ex: (403, {"Content-Type": "application/json"}, b'{"message":"Missing Authentication Token"}'))
    with client_for(s, FakeClock()) as c:
        with pytest.raises(PermissionDeniedError) as info:
            c.publish(MESSAGE)
    assert info.value.text == "Missing Authentication Token" and info.value.attempts == 1


def test_stub_idle_connections_are_reused(stub: Callable[..., Stub]) -> None:
    s = stub(lambda n, ex: accepted())
    transport = HTTPTransport()
    with Client(s.url, "newsroom", StaticToken("t"), transport=transport) as c:
        for _ in range(3):
            c.publish(MESSAGE)
    assert len(s.publishes()) == 3
    assert sum(len(v) for v in transport._idle.values()) == 1
    transport.close()


def test_stub_a_consumer_retries_a_failed_pull_and_reports_it(stub: Callable[..., Stub]) -> None:
    pulls = [
        (503, {"Retry-After": "2", "Content-Type": "application/json"},
         b'{"accepted":false,"violations":[{"source":"policy","rule":"bus.unavailable","message":"x"}]}'),
        (200, {"Content-Type": "application/json"},
         b'{"messages":[{"message_id":"m-1","message_type":"story.context","family":"story-context",'
         b'"ack_id":"a-1","delivery":1,"message":{"x":1}}]}'),
    ]
    s = stub(lambda n, ex: pulls[n] if n < len(pulls) and ex.method == "GET" else
             (200, {"Content-Type": "application/json"}, b'{"acked":1}') if ex.method == "POST" else
             (200, {"Content-Type": "application/json"}, b'{"messages":[]}'))
    clock = FakeClock()
    errors: list[BaseException] = []
    handled: list[bytes] = []
    consumer = Consumer(s.url, "newsroom", "stub-reader", StaticToken("t"), clock=clock, jitter=lambda: 0.0,
                        on_error=errors.append, wait=0)

    def handle(d: object) -> None:
        handled.append(d.message)  # type: ignore[attr-defined]
        consumer.stop()

    consumer.run(handle)
    assert handled == [b'{"x":1}']
    assert clock.sleeps == [2.0] and len(errors) == 1 and errors[0].rule == "bus.unavailable"  # type: ignore[attr-defined]
    acks = [e for e in s.exchanges if e.method == "POST"]
    assert [json.loads(a.body) for a in acks] == [{"ack_ids": ["a-1"]}]
    assert s.exchanges[0].path == "/v1/tenants/newsroom/consumers/stub-reader/messages?max=10&wait=0ms"


def test_stub_the_callers_trace_goes_with_every_publish(stub: Callable[..., Stub]) -> None:
    ambient = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=1")
    given = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    s = stub(lambda n, ex: accepted())
    with client_for(s, FakeClock(), trace_context=lambda: ambient) as c:
        c.publish(MESSAGE)
        c.send(MESSAGE, trace=given).result(timeout=10)
    sent = [(e.headers.get("traceparent"), e.headers.get("tracestate")) for e in s.publishes()]
    assert sent == [(ambient.traceparent, "vendor=1"), (given.traceparent, None)]
