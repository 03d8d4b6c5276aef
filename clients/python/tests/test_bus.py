"""The client against a real `storybus dev`, beyond the conformance
scenarios: other stories carry on, the outbox holds and resends a story,
`storybus outbox` reads a Python outbox, the consumer pulls, acknowledges
and drops duplicates, and trace context reaches it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CMS_ID, CMS_SECRET, WORKSPACE, Bus, FakeClock, Recorder, with_header
from storybus_client import (
    SANDBOX_HEADER,
    AuthenticationError,
    Client,
    ClientCredentials,
    Consumer,
    Delivery,
    FileOutbox,
    HeldError,
    Message,
    RateLimitedError,
    Request,
    RetryPolicy,
    ServerError,
    TraceContext,
)
from storybus_client.consumer import _deliveries


def snapshot(story: str, seq: int, *, message_id: str | None = None, state: str = "draft") -> Message:
    return Message.build(message_type="story.context", system_id="cms", message_id=message_id,
                         payload={"story_id": story, "sequence_number": seq, "state": state,
                                  "headline": "Council approves new harbour bridge"})


def story() -> str:
    return f"py-{uuid.uuid4().hex[:12]}"


def answers_by_body(plan: dict[bytes, list[str]]) -> Callable[[Request], Request]:
    """A decorator for the recording transport: the n-th publish of a
    message's bytes gets the n-th sandbox answer of its plan."""
    counts: dict[bytes, int] = {}
    lock = threading.Lock()

    def decorate(request: Request) -> Request:
        body = request.body or b""
        if not request.url.endswith("/messages") or body not in plan:
            return request
        with lock:
            n = counts.get(body, 0)
            counts[body] = n + 1
        answers = plan[body]
        return with_header(request, SANDBOX_HEADER, answers[n]) if n < len(answers) and answers[n] else request

    return decorate


def cms(bus: Bus, transport: Recorder | None = None, clock: FakeClock | None = None) -> ClientCredentials:
    return ClientCredentials(bus.url, WORKSPACE, CMS_ID, CMS_SECRET, transport=transport, clock=clock)


class GateClock(FakeClock):
    """A fake clock whose sleeps wait for a gate, so a retried message stays
    in its retries until the test lets it go on."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> None:
        super().sleep(seconds, stop)
        assert self.gate.wait(30), "the gate never opened"


def test_other_stories_carry_on_while_one_is_retried(bus: Bus) -> None:
    a, b = snapshot(story(), 1), snapshot(story(), 1)
    recorder = Recorder(decorate=answers_by_body({a.raw: ["bus.publish_failed", "bus.publish_failed"]}))
    b_done = threading.Event()
    clock = GateClock(b_done)
    with Client(bus.url, WORKSPACE, cms(bus, recorder), transport=recorder, clock=clock) as client:
        fa = client.send(a)
        # a is in its retries, waiting on the gate; b, another story, goes on.
        deadline = time.monotonic() + 30
        while not clock.sleeps and time.monotonic() < deadline:
            time.sleep(0.01)
        fb = client.send(b)
        assert fb.result(timeout=30).status == 202
        assert not fa.done(), "a finished although its retries wait on the gate"
        b_done.set()
        ra = fa.result(timeout=30)
    assert (ra.status, ra.attempts) == (202, 3)
    bodies = [s.request.body for s in recorder.publishes()]
    assert bodies == [a.raw, b.raw, a.raw, a.raw]


def test_a_story_s_messages_go_in_the_order_handed_over(bus: Bus) -> None:
    s = story()
    messages = [snapshot(s, n) for n in range(1, 6)]
    first = messages[0].raw
    recorder = Recorder(decorate=answers_by_body({first: ["lost", "bus.publish_failed"]}))
    with Client(bus.url, WORKSPACE, cms(bus, recorder), transport=recorder, clock=FakeClock()) as client:
        futures = [client.send(m) for m in messages]
        results = [f.result(timeout=30) for f in futures]
    assert [r.status for r in results] == [200, 202, 202, 202, 202]
    assert results[0].duplicate and results[0].attempts == 3
    bodies = [s.request.body for s in recorder.publishes()]
    assert bodies == [first, first, first] + [m.raw for m in messages[1:]]


def test_a_kept_message_holds_its_story_until_it_is_resent(bus: Bus, tmp_path: Path) -> None:
    s = story()
    first, second, other = snapshot(s, 1), snapshot(s, 2), snapshot(story(), 1)
    failing = {first.raw: ["bus.publish_failed"] * 4}
    recorder = Recorder(decorate=answers_by_body(failing))
    outbox = FileOutbox(tmp_path / "outbox")
    clock = FakeClock()
    with Client(bus.url, WORKSPACE, cms(bus, recorder), transport=recorder, clock=clock,
                retry=RetryPolicy(attempts=2), outbox=outbox) as client:
        with pytest.raises(ServerError) as kept:
            client.publish(first)
        assert kept.value.kept and kept.value.attempts == 2 and kept.value.outbox_entry
        assert outbox.get(kept.value.outbox_entry).reason.endswith("kept in the outbox for a later resend")
        # The story's next message first resends the kept one, which fails
        # again: the new one is kept behind it without being sent.
        with pytest.raises(HeldError) as held:
            client.publish(second)
        assert held.value.kept and held.value.error_class == "not-delivered"
        assert [e.message for e in outbox.list_pending()] == [first.raw, second.raw]
        assert second.raw not in [x.request.body for x in recorder.publishes()]
        # Another story is not held.
        assert client.publish(other).status == 202
        # Now the bus takes the first: a resend delivers the story in order.
        results = client.resend()
    assert [(r.entry.message_id, r.result.status if r.result else None) for r in results] == \
        [(first.id, 202), (second.id, 202)]
    assert outbox.list_pending() == []
    sent = [x.request.body for x in recorder.publishes()]
    assert sent.index(second.raw) > max(i for i, b in enumerate(sent) if b == first.raw)


def test_storybus_outbox_lists_and_resends_a_python_outbox(bus: Bus, tmp_path: Path) -> None:
    outbox = FileOutbox(tmp_path / "outbox")
    m = Message(json.dumps({"som_version": "1.0", "message_id": str(uuid.uuid4()), "message_type": "story.context",
                            "system_id": "cms", "timestamp": "2026-11-29T09:00:00Z",
                            "payload": {"story_id": story(), "sequence_number": 1, "state": "draft",
                                        "headline": "Kept by Python, resent by the command line"}}, indent=1))
    with Client(bus.url, WORKSPACE, cms(bus), outbox=outbox, sandbox_answer="bus.publish_failed",
                retry=RetryPolicy(attempts=1)) as client:
        with pytest.raises(ServerError):
            client.publish(m)
    env = {**os.environ, "STORYBUS_CLIENT_SECRET": CMS_SECRET}
    listed = subprocess.run([bus.binary, "outbox", "list", "--json", "--outbox", str(tmp_path / "outbox")],
                            capture_output=True, text=True, env=env, timeout=60, check=True)
    lines = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(x["message_id"], x["status"], x["rule"], x["attempts"]) for x in lines] == \
        [(m.id, 503, "bus.publish_failed", 1)]
    assert lines[0]["message"] == json.loads(m.raw)
    resent = subprocess.run([bus.binary, "outbox", "resend", "--url", bus.url, "--workspace", WORKSPACE,
                             "--client-id", CMS_ID, "--outbox", str(tmp_path / "outbox")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert resent.returncode == 0, resent.stderr
    assert json.loads(resent.stdout.splitlines()[0])["status"] == 202
    assert outbox.list_pending() == []


def test_the_sandbox_answer_option_and_its_override(bus: Bus) -> None:
    recorder = Recorder()
    with Client(bus.url, WORKSPACE, cms(bus, recorder), transport=recorder, clock=FakeClock(),
                sandbox_answer="rate.limited", retry=RetryPolicy(attempts=2)) as client:
        with pytest.raises(RateLimitedError) as info:
            client.publish(snapshot(story(), 1))
        assert (info.value.status, info.value.rule, info.value.retry_after, info.value.attempts) == \
            (429, "rate.limited", 1.0, 2)
        assert client.publish(snapshot(story(), 1), sandbox_answer="").status == 202
    headers = [s.request.headers.get(SANDBOX_HEADER) for s in recorder.publishes()]
    assert headers == ["rate.limited", "rate.limited", None]


def test_a_wrong_secret_is_an_authentication_error(bus: Bus) -> None:
    tokens = ClientCredentials(bus.url, WORKSPACE, "nobody-python", "not-the-secret")
    with pytest.raises(AuthenticationError) as info:
        tokens.token()
    assert (info.value.status, info.value.oauth2, info.value.rule) == (401, "invalid_client", "auth.credentials.invalid")


class FlakyTokens:
    """Tokens of the cms connection, the first of them altered."""

    def __init__(self, bus: Bus) -> None:
        self.real = cms(bus)
        self.altered = True
        self.invalidated: list[str] = []

    def token(self) -> str:
        return "altered." + self.real.token() if self.altered else self.real.token()

    def invalidate(self, token: str) -> None:
        self.invalidated.append(token)
        self.altered = False
        self.real.invalidate(token)


def pull_until(consumer: Consumer, want: set[str], handler: Callable[[Delivery], None]) -> None:
    """Runs the consumer until the handler has seen every wanted message_id."""
    seen: set[str] = set()
    deadline = time.monotonic() + 60

    def handle(d: Delivery) -> None:
        handler(d)
        seen.add(d.message_id)
        if want <= seen or time.monotonic() > deadline:
            consumer.stop()

    consumer.run(handle)
    assert want <= seen, f"never delivered: {want - seen}"


def test_a_consumer_gets_each_message_once_with_its_bytes_and_trace(bus: Bus, tmp_path: Path) -> None:
    trace = TraceContext("00-" + uuid.uuid4().hex + "-" + uuid.uuid4().hex[:16] + "-01", "storybus=python")
    spaced = Message(json.dumps({"som_version": "1.0", "message_id": str(uuid.uuid4()), "message_type": "story.context",
                                 "system_id": "cms", "timestamp": "2026-11-29T09:00:00Z",
                                 "payload": {"story_id": story(), "sequence_number": 1, "state": "draft",
                                             "headline": "Brücke, with spaces kept"}}, indent=2, ensure_ascii=False))
    plain = snapshot(story(), 1)
    with Client(bus.url, WORKSPACE, cms(bus)) as client:
        client.publish(spaced, trace=trace)
        client.publish(plain)
    tokens = FlakyTokens(bus)
    recorder = Recorder()
    consumer = Consumer(bus.url, WORKSPACE, "python-tests", tokens, wait=1, transport=recorder)
    got: dict[str, list[Delivery]] = {}
    pull_until(consumer, {spaced.id, plain.id}, lambda d: got.setdefault(d.message_id, []).append(d))
    assert len(tokens.invalidated) == 1, "the altered token was not refreshed once"
    d = got[spaced.id][0]
    assert d.message == spaced.raw, "the delivered message is not the bytes published"
    assert (d.family, d.message_type, d.delivery) == ("story-context", "story.context", 1)
    assert d.trace is not None and d.trace.trace_id == trace.trace_id
    assert len(got[spaced.id]) == 1 and len(got[plain.id]) == 1

    # A redelivery of a handled message is dropped: acknowledged without
    # calling the handler.
    again = snapshot(story(), 1)
    with Client(bus.url, WORKSPACE, cms(bus)) as client:
        client.publish(again)
    first: list[Delivery] = []
    deadline = time.monotonic() + 60
    while not first and time.monotonic() < deadline:
        first = [x for x in consumer.fetch() if x.message_id == again.id]
    assert first, "the message was never delivered"
    consumer.dedup.done(again.id)
    consumer.nak(*first)  # delivered again at once
    handled: list[Delivery] = []
    for _ in range(20):
        before = len(recorder.sent)
        consumer.run_once(handled.append)
        pulled = [d for s in recorder.sent[before:] if s.request.method == "GET" and s.response is not None
                  for d in _deliveries(s.response.body) if d.message_id == again.id]
        if pulled:
            break
    else:
        pytest.fail("no redelivery after nak")
    assert pulled[0].delivery == 2
    assert again.id not in [d.message_id for d in handled], "the handler got the duplicate"
    acks = [json.loads(s.request.body or b"") for s in recorder.sent[before:] if s.request.method == "POST" and s.status == 200]
    assert any(pulled[0].ack_id in a["ack_ids"] for a in acks), f"the duplicate was not acknowledged: {acks} {pulled} {[(s.request.method, s.status) for s in recorder.sent[before:]]}"


def test_the_asyncio_client_keeps_the_discipline_and_the_order(bus: Bus) -> None:
    import asyncio

    from storybus_client import AsyncClient

    s = story()
    messages = [snapshot(s, n) for n in range(1, 4)]
    other = snapshot(story(), 1)
    recorder = Recorder(decorate=answers_by_body({messages[0].raw: ["bus.publish_failed", "lost"]}))

    async def main() -> list[int]:
        async with AsyncClient(bus.url, WORKSPACE, cms(bus, recorder), transport=recorder, clock=FakeClock()) as client:
            results = await asyncio.gather(*(client.publish(m) for m in [*messages, other]))
        return [r.status for r in results]

    assert asyncio.run(main()) == [200, 202, 202, 202]
    story_bodies = [x.request.body for x in recorder.publishes() if x.request.body != other.raw]
    assert story_bodies == [messages[0].raw] * 3 + [m.raw for m in messages[1:]]
