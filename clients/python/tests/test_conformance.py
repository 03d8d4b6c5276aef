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

from conftest import CMS_SECRET, REPO, Bus, FakeClock, Recorder, with_header
from storybus_client import (
    SANDBOX_HEADER,
    Client,
    ClientCredentials,
    FileOutbox,
    Message,
    PublishResult,
    RefusedError,
    RetryPolicy,
    StorybusError,
)

FILE = REPO / "clients" / "conformance" / "scenarios.json"
SPEC: dict[str, Any] = json.loads(FILE.read_text())

STEP_MEMBERS = {"publish", "answers", "expect"}
PLAIN_EXPECT = {"outcome", "status", "rule", "path", "attempts", "sameBytes", "tokenRequests",
                "minWaitSeconds", "waitsAtLeast", "outbox"}
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


@dataclass
class Route:
    """What the runner's transport does with one message's attempts."""

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
    routes: dict[bytes, Route] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.messages = {k: serialise(v) for k, v in SPEC["messages"].items()}
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
            route = self.routes.get(request.body or b"")
            if route is None:
                self.order.append("?")
                return request
            n = route.attempts
            route.attempts += 1
            self.order.append(route.key)
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
        assert body not in self.routes, f"{where}: the message {key!r} twice in one step"
        self.routes[body] = Route(key, list(step.get("answers", [])))
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
        self.check(where, step["publish"], body, expect, outcome, sent)
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
            mine = [s for s in sent if s.request.body == body]
            self.check(f"{where}.{j + 1}", sub["publish"], body, sub.get("expect", {}), outcome, mine)
        if "order" in expect:
            assert self.order == expect["order"], f"{where}: order {self.order}, want {expect['order']}"

    @staticmethod
    def outcome(call: Any) -> PublishResult | StorybusError:
        try:
            result: PublishResult = call()
        except StorybusError as exc:
            return exc
        return result

    def check(self, where: str, key: str, body: bytes, expect: dict[str, Any],
              outcome: PublishResult | StorybusError, sent: list[Any]) -> None:
        attempts = [s for s in sent if s.request.url.endswith("/messages")]
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
        if expect.get("sameBytes"):
            for n, s in enumerate(attempts):
                assert s.request.body == body, f"{where}: sameBytes: attempt {n + 1} sent other bytes"
        if "outbox" in expect:
            message_id = SPEC["messages"][key].get("message_id", "")
            mine = [e for e in self.outbox.list_pending() if e.message_id == message_id]
            if expect["outbox"]:
                assert mine, f"{where}: outbox: no pending entry of {message_id}"
                assert all(e.message == body for e in mine), f"{where}: outbox: the kept bytes changed"
            else:
                assert not mine, f"{where}: outbox: {len(mine)} pending entries of {message_id}, want none"


@pytest.mark.parametrize("scenario", SPEC["scenarios"], ids=[s["name"] for s in SPEC["scenarios"]])
def test_scenario(scenario: dict[str, Any], bus: Bus, tmp_path: Path) -> None:
    Runner(bus, tmp_path, scenario).run()
