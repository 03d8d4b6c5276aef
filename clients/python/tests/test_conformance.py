"""The client conformance scenarios (clients/conformance/scenarios.json),
every one of them, against a real `storybus dev`.

The runner wraps the client's transport to set the sandbox header per
attempt and to record every request, and gives the client a clock whose
sleeps return at once, so a scenario that waits 90 s runs in milliseconds.
A scenario added to the file runs here without a change.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import CMS_SECRET, REPO, Bus, FakeClock, Recorder, Sent, with_header
from storybus_client import (
    SANDBOX_HEADER,
    Client,
    ClientCredentials,
    FileOutbox,
    Message,
    PublishResult,
    RefusedError,
    Request,
    RetryPolicy,
    StorybusError,
)

FILE = REPO / "clients" / "conformance" / "scenarios.json"
SPEC: dict[str, Any] = json.loads(FILE.read_text())

STEP_MEMBERS = {"publish", "answers", "expect"}
PLAIN_EXPECT = {"outcome", "status", "rule", "path", "attempts", "sameBytes", "tokenRequests",
                "minWaitSeconds", "waitsAtLeast", "outbox", "order"}
LISTED_EXPECT = {"outcome", "status", "rule", "path", "attempts", "sameBytes", "outbox"}
CONCURRENT_EXPECT = {"order"}


def test_the_file_is_version_1() -> None:
    assert SPEC["version"] == 1, f"{FILE} is version {SPEC['version']}; this runner reads version 1"
    assert SPEC["scenarios"], "the file lists no scenario"
    names = [s["name"] for s in SPEC["scenarios"]]
    assert len(names) == len(set(names)), "scenario names repeat"


def serialise(message: Mapping[str, Any]) -> bytes:
    """The file's message, compact, with its members in the file's order."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def message_id(body: bytes | None) -> str:
    """The message_id of an attempt's body: what tells a step's own attempts
    from those of a kept message the client resends before it."""
    try:
        parsed = json.loads(body or b"")
    except ValueError:
        return ""
    return str(parsed.get("message_id", "")) if isinstance(parsed, dict) else ""


@dataclass
class Route:
    """What the runner's transport does with the attempts of one step's
    message."""

    key: str
    answers: list[str]
    attempts: int = 0


@dataclass
class Runner:
    """One scenario's client, outbox and recording transport."""

    bus: Bus
    tmp: Path
    scenario: dict[str, Any]
    clock: FakeClock = field(default_factory=FakeClock)
    # The step's messages by message_id.
    routes: dict[str, Route] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.messages = {k: serialise(v) for k, v in SPEC["messages"].items()}
        # An attempt is named in the order by the message whose bytes it sent.
        self.names = {body: key for key, body in self.messages.items()}
        assert len(self.names) == len(self.messages), "two messages of the file are the same bytes"
        self.recorder = Recorder(decorate=self.decorate)
        self.outbox = FileOutbox(self.tmp / "outbox")
        retry = self.scenario.get("retry")
        policy = RetryPolicy(attempts=retry["maxAttempts"]) if retry and "maxAttempts" in retry else RetryPolicy()
        tokens = ClientCredentials(self.bus.url, SPEC["workspace"], SPEC["clientId"], CMS_SECRET,
                                   transport=self.recorder, clock=self.clock)
        self.client = Client(self.bus.url, SPEC["workspace"], tokens, transport=self.recorder, retry=policy,
                             outbox=self.outbox, clock=self.clock,
                             jitter=random.Random(self.scenario["name"]).random)

    def decorate(self, request: Any) -> Any:
        """Sets the sandbox header of a publish attempt as its step says."""
        if not request.url.endswith("/messages"):
            return request
        with self.lock:
            self.order.append(self.names.get(request.body or b"", "?"))
            route = self.routes.get(message_id(request.body))
            if route is None:
                return request
            n = route.attempts
            route.attempts += 1
        if n < len(route.answers) and route.answers[n]:
            return with_header(request, SANDBOX_HEADER, route.answers[n])
        return request

    def run(self) -> None:
        with self.client:
            for i, step in enumerate(self.scenario["steps"]):
                where = f"scenario {self.scenario['name']!r} ({self.scenario['summary']}), step {i + 1}"
                if "concurrent" in step:
                    self.concurrent(step, where)
                else:
                    self.plain(step, where)

    def route(self, step: dict[str, Any], where: str) -> bytes:
        unknown = set(step) - STEP_MEMBERS
        assert not unknown, f"{where}: unknown step members {sorted(unknown)}"
        key = step["publish"]
        assert key in self.messages, f"{where}: no message {key!r}"
        body = self.messages[key]
        mid = message_id(body)
        assert mid not in self.routes, f"{where}: two messages of one step have message_id {mid}"
        self.routes[mid] = Route(key, list(step.get("answers", [])))
        return body

    def plain(self, step: dict[str, Any], where: str) -> None:
        expect = step.get("expect", {})
        unknown = set(expect) - PLAIN_EXPECT
        assert not unknown, f"{where}: expect members this runner does not know: {sorted(unknown)}"
        self.routes, self.order = {}, []
        sent_before, sleeps_before = len(self.recorder.sent), len(self.clock.sleeps)
        body = self.route(step, where)
        outcome = self.outcome(lambda: self.client.publish(Message(body)))
        sent = self.recorder.sent[sent_before:]
        waits = self.clock.sleeps[sleeps_before:]
        self.check(where, body, expect, outcome, sent)
        if "tokenRequests" in expect:
            got = sum(1 for s in sent if s.request.url.endswith("/tokens"))
            assert got == expect["tokenRequests"], f"{where}: tokenRequests {got}, want {expect['tokenRequests']}"
        if "minWaitSeconds" in expect:
            assert sum(waits) >= expect["minWaitSeconds"], \
                f"{where}: minWaitSeconds: the waits {waits} add up to under {expect['minWaitSeconds']}"
        if "waitsAtLeast" in expect:
            want = expect["waitsAtLeast"]
            assert len(waits) >= len(want), f"{where}: waitsAtLeast: waits {waits}, want at least {want}"
            for n, (got_wait, least) in enumerate(zip(waits, want)):
                assert got_wait >= least, f"{where}: waitsAtLeast: wait {n + 1} is {got_wait} s, want {least} s"
        if "order" in expect:
            assert self.order == expect["order"], f"{where}: order {self.order}, want {expect['order']}"

    def concurrent(self, step: dict[str, Any], where: str) -> None:
        unknown = set(step) - {"concurrent", "expect"}
        assert not unknown, f"{where}: unknown step members {sorted(unknown)}"
        expect = step.get("expect", {})
        unknown = set(expect) - CONCURRENT_EXPECT
        assert not unknown, f"{where}: expect members this runner does not know here: {sorted(unknown)}"
        self.routes, self.order = {}, []
        sent_before = len(self.recorder.sent)
        listed = step["concurrent"]
        bodies = []
        for j, sub in enumerate(listed):
            sub_expect = sub.get("expect", {})
            unknown = set(sub_expect) - LISTED_EXPECT
            assert not unknown, f"{where}.{j + 1}: expect members this runner does not know here: {sorted(unknown)}"
            bodies.append(self.route(sub, f"{where}.{j + 1}"))
        # Every message handed over at once, in the listed order.
        futures: list[Future[PublishResult]] = [self.client.send(Message(b)) for b in bodies]
        outcomes = [self.outcome(f.result) for f in futures]
        sent = self.recorder.sent[sent_before:]
        for j, (sub, body, outcome) in enumerate(zip(listed, bodies, outcomes)):
            self.check(f"{where}.{j + 1}", body, sub.get("expect", {}), outcome, sent)
        if "order" in expect:
            assert self.order == expect["order"], f"{where}: order {self.order}, want {expect['order']}"

    @staticmethod
    def outcome(call: Any) -> PublishResult | StorybusError:
        try:
            result: PublishResult = call()
        except StorybusError as exc:
            return exc
        return result

    def check(self, where: str, body: bytes, expect: dict[str, Any],
              outcome: PublishResult | StorybusError, sent: list[Any]) -> None:
        # The step's message's own attempts: an attempt of another message
        # (a kept one the client resends first) counts in no attempts.
        mid = message_id(body)
        attempts = [s for s in sent if s.request.url.endswith("/messages") and message_id(s.request.body) == mid]
        got: dict[str, Any]
        if isinstance(outcome, PublishResult):
            kind = "duplicate" if outcome.status == 200 and outcome.duplicate else \
                "accepted" if outcome.status == 202 and not outcome.duplicate else f"success {outcome.status}"
            got = {"outcome": kind, "status": outcome.status, "rule": "", "path": ""}
        else:
            if isinstance(outcome, RefusedError) and not outcome.kept:
                kind = "refused"
            elif outcome.kept and not outcome.refused:
                kind = "kept"
            else:
                kind = f"{type(outcome).__name__} (kept {outcome.kept})"
            got = {"outcome": kind, "status": outcome.status, "rule": outcome.rule, "path": outcome.path}
        for member in ("outcome", "status", "rule", "path"):
            if member in expect:
                assert got[member] == expect[member], \
                    f"{where}: {member} {got[member]!r}, want {expect[member]!r} (the client answered {outcome!r})"
        if "attempts" in expect:
            assert len(attempts) == expect["attempts"], \
                f"{where}: attempts {len(attempts)}, want {expect['attempts']} (the client answered {outcome!r})"
        if "sameBytes" in expect:
            same = all(s.request.body == body for s in attempts)
            assert same == expect["sameBytes"], f"{where}: sameBytes {same}, want {expect['sameBytes']}"
        if "outbox" in expect:
            mine = [e for e in self.outbox.list_pending() if e.message_id == mid]
            if expect["outbox"]:
                assert mine, f"{where}: outbox: no pending entry of {mid}"
                assert all(e.message == body for e in mine), f"{where}: outbox: the kept bytes changed"
            else:
                assert not mine, f"{where}: outbox: {len(mine)} pending entries of {mid}, want none"


@pytest.mark.parametrize("scenario", SPEC["scenarios"], ids=[s["name"] for s in SPEC["scenarios"]])
def test_scenario(scenario: dict[str, Any], bus: Bus, tmp_path: Path) -> None:
    Runner(bus, tmp_path, scenario).run()


def test_a_step_counts_its_own_message_s_attempts(tmp_path: Path) -> None:
    """attempts and sameBytes are the step's message's own: a kept message of
    the story resent first, in the same step, counts in neither (the
    scenario file's README), as in the Go and TypeScript runners."""
    never = Bus(url="http://127.0.0.1:9", ops="", binary="", process=None)  # type: ignore[arg-type]
    runner = Runner(never, tmp_path, {"name": "unit", "summary": "", "steps": []})
    runner.client.close()  # it sends nothing: check() is given what was sent
    kept, mine = runner.messages["kept-first"], runner.messages["kept-next"]
    sent = [Sent(Request("POST", never.url + "/v1/tenants/newsroom/messages", body=b), 202) for b in (kept, mine)]
    result = PublishResult(message_id=message_id(mine), message_type="story.context", family="story-context",
                           status=202, duplicate=False, tolerated=(), attempts=1)
    runner.check("unit", mine, {"attempts": 1, "sameBytes": True}, result, sent)
    with pytest.raises(AssertionError, match="attempts 1, want 2"):
        runner.check("unit", mine, {"attempts": 2}, result, sent)
    # Other bytes under the step's message_id are the step's: sameBytes fails.
    changed = Sent(Request("POST", sent[1].request.url, body=mine.replace(b"ready", b"draft")), 202)
    with pytest.raises(AssertionError, match="sameBytes False, want True"):
        runner.check("unit", mine, {"attempts": 2, "sameBytes": True}, result, [*sent, changed])
