"""Unit tests of the pieces that need no bus: the retry policy, the error
classes, messages, the outbox, the de-duplicator, trace context and the
pull answer's reader."""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
from pathlib import Path

import pytest

from conftest import FakeClock
from storybus_client import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    Dedup,
    ErrorClass,
    FileOutbox,
    Message,
    NoAnswerError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    RefusedError,
    RetryPolicy,
    ServerError,
    StorybusError,
    TemporaryError,
    TraceContext,
    Violation,
    error_for_status,
)
from storybus_client._wire import retry_after
from storybus_client.consumer import _deliveries


class TestRetryPolicy:
    def test_backoff_doubles_from_half_a_second_and_is_capped_at_30_seconds(self) -> None:
        p = RetryPolicy()
        nominal = [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
        for n, base in enumerate(nominal, start=1):
            assert p.backoff(n, 0.0) == pytest.approx(base / 2), n
            assert p.backoff(n, 0.999999) == pytest.approx(base, rel=1e-5), n
            assert base / 2 <= p.backoff(n, 0.5) <= base

    def test_the_default_retries_for_more_than_60_seconds(self) -> None:
        p = RetryPolicy()
        assert p.attempts == 10
        assert p.min_total_wait() >= 60
        p.validate()

    def test_a_policy_that_gives_up_in_under_30_seconds_is_refused(self) -> None:
        with pytest.raises(ValueError, match="under 30 s"):
            RetryPolicy(attempts=4).validate()

    def test_nonsense_is_refused(self) -> None:
        with pytest.raises(ValueError):
            RetryPolicy(attempts=0)
        with pytest.raises(ValueError):
            RetryPolicy(initial=-1)


class TestErrors:
    @pytest.mark.parametrize(
        ("status", "cls", "refused", "temporary"),
        [
            (400, BadRequestError, True, False),
            (401, AuthenticationError, False, False),
            (403, PermissionDeniedError, True, False),
            (404, RefusedError, True, False),
            (408, TemporaryError, False, True),
            (409, ConflictError, True, False),
            (413, PayloadTooLargeError, True, False),
            (429, RateLimitedError, False, True),
            (500, ServerError, False, True),
            (502, ServerError, False, True),
            (503, ServerError, False, True),
        ],
    )
    def test_the_class_follows_the_status(self, status: int, cls: type, refused: bool, temporary: bool) -> None:
        e = error_for_status(status, rule="r")
        assert type(e) is cls
        assert e.refused is refused
        assert e.temporary is temporary
        assert isinstance(e, RefusedError) is refused
        assert isinstance(e, TemporaryError) is temporary

    def test_no_answer_is_temporary(self) -> None:
        e = error_for_status(0, cause=TimeoutError("timed out"))
        assert isinstance(e, NoAnswerError) and e.temporary and not e.refused
        assert e.__cause__ is e.cause

    def test_an_inactive_connection_at_the_token_endpoint_is_not_allowed(self) -> None:
        e = error_for_status(400, oauth2="unauthorized_client", rule="connection.inactive")
        assert isinstance(e, PermissionDeniedError)
        assert e.error_class is ErrorClass.NOT_ALLOWED
        assert "may not get tokens" in e.advice

    def test_user_messages_are_the_documentation_s(self) -> None:
        cases = [
            (error_for_status(400, violations=[Violation("schema", "story-context.required", path="/payload/headline")]),
             "invalid", "This story couldn't be shared with other systems: payload.headline is invalid."),
            (error_for_status(413, rule="message.too_large"), "invalid",
             "This story couldn't be shared with other systems: it is too large."),
            (error_for_status(403, rule="grant.message_type"), "not-allowed", "This system isn't allowed to publish that."),
            (error_for_status(409, rule="sequence.stale"), "story-changed", "Someone else changed this story."),
            (error_for_status(409, rule="sequence.terminal"), "story-killed", "This story was killed and can't be reopened."),
            (error_for_status(409, rule="message_id.reused"), "invalid",
             "This story couldn't be shared with other systems: the message is invalid."),
            (error_for_status(503, rule="bus.publish_failed", attempts=10, kept=True), "not-delivered",
             "Other systems haven't received the latest version yet. Retrying."),
        ]
        for e, cls, text in cases:
            assert e.error_class == cls, e
            assert e.user_message == text, e

    def test_rebuild_is_for_stale_and_contended_snapshots_only(self) -> None:
        assert error_for_status(409, rule="sequence.stale", snapshot=True).rebuild
        assert error_for_status(409, rule="commit.contention", snapshot=True).rebuild
        assert not error_for_status(409, rule="sequence.stale", snapshot=False).rebuild
        assert not error_for_status(409, rule="sequence.terminal", snapshot=True).rebuild

    def test_needs_alert(self) -> None:
        for status, rule in [(400, "x"), (401, "auth.token.invalid"), (403, "grant.system_id"), (413, "message.too_large"),
                             (409, "message_id.reused")]:
            assert error_for_status(status, rule=rule).needs_alert, status
        for status, rule in [(409, "sequence.stale"), (503, "bus.publish_failed"), (429, "rate.limited")]:
            assert not error_for_status(status, rule=rule).needs_alert, status

    def test_the_text_is_one_line_with_status_rule_path_and_advice(self) -> None:
        e = error_for_status(400, message_id="m-1", attempts=1,
                             violations=[Violation("schema", "envelope.format.uuid", "must be a uuid", "/message_id")])
        assert str(e) == ("message m-1: 400 envelope.format.uuid at /message_id: a bug in the producing product: "
                          "fix the message at the rule's path; it is not resent unchanged")
        e = error_for_status(0, cause=ConnectionError("reset\nby peer"), attempts=3, message_id="m-2")
        assert "\n" not in str(e) and "after 3 attempts" in str(e) and "not kept: no outbox" in str(e)

    def test_replace_and_pickle_keep_the_class_and_attributes(self) -> None:
        e = error_for_status(409, rule="sequence.stale", snapshot=True, attempts=1, message_id="m")
        c = e.replace(attempts=0, not_resent=True)
        assert type(c) is ConflictError and c.attempts == 0 and c.not_resent and e.attempts == 1
        assert "refused before and was not sent again" in str(c)
        p = pickle.loads(pickle.dumps(e))
        assert type(p) is ConflictError and p.rule == "sequence.stale" and p.rebuild


class TestRetryAfter:
    def test_seconds_and_http_dates(self) -> None:
        now = dt.datetime(2026, 11, 29, 9, 0, 0, tzinfo=dt.timezone.utc).timestamp()
        assert retry_after("30", now) == 30
        assert retry_after(" 1 ", now) == 1
        assert retry_after("Sun, 29 Nov 2026 09:00:42 GMT", now) == 42
        assert retry_after("Sun, 29 Nov 2026 08:00:00 GMT", now) == 0
        assert retry_after("soon", now) == 0
        assert retry_after("", now) == 0


class TestMessage:
    def test_build_serialises_once_as_som_1_0(self) -> None:
        m = Message.build(
            message_type="story.context", system_id="cms", message_id="6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20",
            timestamp=dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.timezone.utc),
            payload={"story_id": "s-1", "sequence_number": 1, "state": "draft", "headline": "Brücke"},
        )
        assert m.raw == ('{"som_version":"1.0","message_id":"6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20",'
                         '"message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z",'
                         '"payload":{"story_id":"s-1","sequence_number":1,"state":"draft","headline":"Brücke"}}').encode()
        assert m.id == "6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20" and m.is_snapshot and m.key == "story:s-1"

    def test_build_gives_a_new_id_and_a_utc_timestamp_with_its_fraction(self) -> None:
        a = Message.build(message_type="story.event", system_id="cms", payload={"story_id": "s"},
                          timestamp=dt.datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=dt.timezone(dt.timedelta(hours=2))))
        b = Message.build(message_type="story.event", system_id="cms", payload={"story_id": "s"})
        assert a.id != b.id and len(a.id) == 36
        assert a.json()["timestamp"] == "2026-01-02T01:04:05.12Z"

    def test_a_naive_timestamp_is_refused(self) -> None:
        with pytest.raises(ValueError, match="time zone"):
            Message.build(message_type="story.event", system_id="cms", payload={}, timestamp=dt.datetime(2026, 1, 1))

    def test_wrapping_keeps_the_bytes_and_reads_the_key(self) -> None:
        raw = b'{ "message_id" : "m", "message_type": "asset.reference", "payload": {"asset_id": "a-1"} }'
        m = Message(raw)
        assert m.raw == raw and m.key == "asset:a-1" and not m.is_snapshot
        assert Message(b'{"message_id": 7, "payload": []}').key == "message:"

    @pytest.mark.parametrize("raw", [b"", b"[1]", b'"x"', b"{not json", b"  42"])
    def test_what_is_not_a_json_object_is_refused(self, raw: bytes) -> None:
        with pytest.raises(ValueError, match="JSON object"):
            Message(raw)


class TestFileOutbox:
    def msg(self, story: str, n: int) -> Message:
        return Message.build(message_type="story.context", system_id="cms", message_id=f"00000000-0000-4000-8000-{n:012d}",
                             payload={"story_id": story, "sequence_number": n, "state": "draft", "headline": "h"})

    def test_entries_keep_the_bytes_in_story_order_across_reopening(self, tmp_path: Path) -> None:
        box = FileOutbox(tmp_path / "o")
        a1, b1, a2 = self.msg("a", 1), self.msg("b", 2), self.msg("a", 3)
        cause = error_for_status(503, rule="bus.publish_failed", attempts=3)
        e1 = box.put(a1, cause, 1000.0)
        box.put(b1, None, 1000.0)
        box.put(a2, None, 1000.0)  # the same time: still behind a1
        again = FileOutbox(tmp_path / "o")
        assert [e.message for e in again.pending("story:a")] == [a1.raw, a2.raw]
        # Oldest first over every story: a1 and b1 share a time, a2 comes after.
        assert [e.message_id for e in again.list_pending()] == [a1.id, b1.id, a2.id]
        assert again.keys()[0] == "story:a"
        got = again.get(e1.id)
        assert (got.status, got.rule, got.attempts, got.message) == (503, "bus.publish_failed", 3, a1.raw)
        assert got.kept_at == dt.datetime.fromtimestamp(1000.0, dt.timezone.utc)
        assert again.held("story:a") and not again.held("story:c")

    def test_the_layout_and_metadata_are_the_go_client_s(self, tmp_path: Path) -> None:
        box = FileOutbox(tmp_path)
        m = self.msg("story-7", 1)
        e = box.put(m, error_for_status(429, rule="rate.limited", attempts=2), 1764406800.5)
        # base64url of "story:story-7", no padding; <ns stamp>-<message_id>.msg
        assert e.id == "pending/c3Rvcnk6c3RvcnktNw/01764406800500000000-00000000-0000-4000-8000-000000000001.msg"
        line, _, message = (tmp_path / e.id).read_bytes().partition(b"\n")
        meta = json.loads(line)
        assert set(meta) == {"id", "message_id", "message_type", "key", "kept_at", "attempts", "status", "rule", "reason"}
        assert meta["kept_at"] == "2025-11-29T09:00:00.5Z" and meta["attempts"] == 2 and meta["status"] == 429
        assert message == m.raw

    def test_update_refuse_and_remove(self, tmp_path: Path) -> None:
        box = FileOutbox(tmp_path)
        e = box.put(self.msg("s", 1), None, 5.0)
        box.update(e, error_for_status(503, rule="bus.unavailable", attempts=4))
        assert box.get(e.id).attempts == 4
        moved = box.refuse(box.get(e.id), error_for_status(409, rule="sequence.stale", attempts=1))
        assert moved.refused and moved.id.startswith("refused/") and moved.attempts == 5
        assert box.list_pending() == [] and [r.id for r in box.list_refused()] == [moved.id]
        assert not (tmp_path / "pending" / e.id.split("/")[1]).exists(), "the story's emptied directory stays"
        box.remove(moved.id)
        box.remove(moved.id)  # already gone: no error
        assert box.list_refused() == []

    @pytest.mark.parametrize("bad", ["../x.msg", "pending/../../x.msg", "refused/a/b.msg", "pending/x.msg", "refused/x.txt", "/etc/passwd"])
    def test_ids_that_leave_the_outbox_are_refused(self, tmp_path: Path, bad: str) -> None:
        with pytest.raises(KeyError):
            FileOutbox(tmp_path).get(bad)

    def test_a_crash_leaves_no_half_entry(self, tmp_path: Path) -> None:
        box = FileOutbox(tmp_path)
        box.put(self.msg("s", 1), None, 1.0)
        # A temporary file a crash left behind is not an entry.
        d = next((tmp_path / "pending").iterdir())
        (d / ".tmp-123").write_bytes(b"half")
        assert len(box.list_pending()) == 1
        assert sorted(p.name.endswith(".msg") for p in d.iterdir()) == [False, True]


class TestDedup:
    def test_remembers_within_the_window_only(self) -> None:
        clock = FakeClock(1000.0)
        d = Dedup(size=10, window=60, clock=clock)
        d.done("a")
        assert d.seen("a") and not d.seen("b")
        clock.advance(59)
        assert d.seen("a")
        clock.advance(1)
        assert not d.seen("a")

    def test_forgets_the_oldest_when_full(self) -> None:
        d = Dedup(size=3, clock=FakeClock(0.0))
        for i in "abcd":
            d.done(i)
        assert len(d) == 3 and not d.seen("a") and d.seen("d")

    def test_a_file_remembers_across_restarts_and_skips_a_torn_line(self, tmp_path: Path) -> None:
        clock = FakeClock(1000.0)
        path = tmp_path / "dedup"
        with Dedup.open(path, size=10, window=60, clock=clock) as d:
            d.done("a")
            clock.advance(30)
            d.done("b")
        with open(path, "ab") as f:
            f.write(b"123 torn-without-newline")
        clock.advance(40)  # a is 70 s old, b 40 s
        with Dedup.open(path, size=10, window=60, clock=clock) as d:
            assert d.seen("b") and not d.seen("a") and not d.seen("torn-without-newline")
            with pytest.raises(ValueError, match="line break"):
                d.done("x\ny")
        # Rewritten on opening with the remembered ids only; the id with a
        # line break is not written.
        assert path.read_bytes() == b"1030000000000 b\n"

    def test_the_file_is_rewritten_once_twice_its_size(self, tmp_path: Path) -> None:
        path = tmp_path / "dedup"
        with Dedup.open(path, size=2, clock=FakeClock(5.0)) as d:
            for i in "abcdef":
                d.done(i)
        assert path.read_bytes() == b"5000000000 e\n5000000000 f\n"
        assert [n for n in os.listdir(tmp_path) if n != "dedup"] == []


class TestTraceContext:
    def test_valid_and_invalid_traceparents(self) -> None:
        tc = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE")
        assert tc.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert tc.headers() == {"traceparent": tc.traceparent, "tracestate": "congo=t61rcWkgMzE"}
        for bad in ["", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                    "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"]:
            with pytest.raises(ValueError):
                TraceContext(bad)
        assert TraceContext.from_headers({"TraceParent": tc.traceparent}) == TraceContext(tc.traceparent)
        assert TraceContext.from_headers({"traceparent": "junk"}) is None
        assert TraceContext.from_headers({}) is None


class TestPullAnswer:
    def test_messages_keep_their_exact_bytes(self) -> None:
        inner = '{ "som_version":"1.0",  "message_id":"m-1","payload":{"headline":"Br\\u00fccke \\"x\\"", "n": 1.50} }'
        body = ('{"messages":[{"message_id":"m-1","message_type":"story.context","family":"story-context",'
                '"ack_id":"A.b","delivery":2,"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",'
                f'"message":{inner}}}, {{"message_id":"m-2","message":{{}},"ack_id":"B","delivery":1}}], "more": {{"x": [1]}}}}')
        ds = _deliveries(body.encode())
        assert [d.message_id for d in ds] == ["m-1", "m-2"]
        assert ds[0].message == inner.encode() and ds[0].delivery == 2 and ds[0].ack_id == "A.b"
        assert ds[0].json()["payload"]["headline"] == 'Brücke "x"'
        trace = ds[0].trace
        assert trace is not None and trace.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert ds[1].message == b"{}" and ds[1].trace is None
        assert _deliveries(b'{"messages":[]}') == [] and _deliveries(b'{"messages":null}') == []

    @pytest.mark.parametrize("body", [b"", b"<html>", b'{"messages":[1]}', b'{"messages":[{"a":1}] junk', b"[]"])
    def test_what_is_not_a_pull_answer_is_refused(self, body: bytes) -> None:
        with pytest.raises(ValueError):
            _deliveries(body)


def test_every_error_is_a_storybus_error() -> None:
    for cls in (RefusedError, TemporaryError, AuthenticationError):
        assert issubclass(cls, StorybusError)
