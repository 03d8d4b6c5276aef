// The error classes, advice and helpers, and the retry policy's numbers:
// pure functions, without a bus.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  asError,
  backoff,
  defaultRetryPolicy,
  hasRule,
  isRefused,
  MIN_RETRY_WINDOW_MS,
  minTotalWait,
  NoAnswerError,
  ruleOf,
  statusOf,
  StorybusError,
  UntrustedCertificateError,
  validateRetryPolicy,
} from "@storybus/client";

describe("StorybusError", () => {
  it("classes failures as the documentation's 'Show it to people' does", () => {
    // The same table as the Go client's ExampleError_UserMessage.
    const cases: [StorybusError, string][] = [
      [
        new StorybusError({
          status: 400,
          rule: "story-context.required",
          violations: [{ source: "schema", rule: "story-context.required", message: "x", path: "/payload/headline" }],
        }),
        "400 invalid: This story couldn't be shared with other systems: payload.headline is invalid.",
      ],
      [new StorybusError({ status: 413, rule: "message.too_large" }), "413 invalid: This story couldn't be shared with other systems: it is too large."],
      [new StorybusError({ status: 403, rule: "grant.message_type" }), "403 not-allowed: This system isn't allowed to publish that."],
      [new StorybusError({ status: 409, rule: "story.not_owner" }), "409 not-allowed: This system isn't allowed to publish that."],
      [new StorybusError({ status: 409, rule: "sequence.stale" }), "409 story-changed: Someone else changed this story."],
      [new StorybusError({ status: 409, rule: "message.superseded" }), "409 story-changed: Someone else changed this story."],
      [new StorybusError({ status: 409, rule: "sequence.terminal" }), "409 story-killed: This story was killed and can't be reopened."],
      [new StorybusError({ status: 409, rule: "message_id.reused" }), "409 invalid: This story couldn't be shared with other systems: the message is invalid."],
      [
        new StorybusError({ status: 503, rule: "bus.publish_failed", attempts: 10, kept: true }),
        "503 not-delivered: Other systems haven't received the latest version yet. Retrying.",
      ],
      [new StorybusError({ status: 400, oauth2: "unauthorized_client", rule: "connection.inactive" }), "400 not-allowed: This system isn't allowed to publish that."],
    ];
    for (const [e, want] of cases) {
      assert.equal(`${e.status} ${e.class()}: ${e.userMessage()}`, want);
    }
  });

  it("says what happened and what to do in one line, naming the rule, path and the bus's explanation", () => {
    const e = new StorybusError({
      status: 409,
      rule: "sequence.stale",
      violations: [{ source: "sequence", rule: "sequence.stale", message: "not newer", path: "/payload/sequence_number" }],
      messageId: "9b2e4f71-0c3d-4a5b-8e6f-7a8b9c0d1e2f",
      snapshot: true,
    });
    assert.equal(
      e.message,
      'message 9b2e4f71-0c3d-4a5b-8e6f-7a8b9c0d1e2f: 409 sequence.stale at /payload/sequence_number "not newer": it is not resent; rebuild a complete snapshot from current state, with the next sequence_number and a new message_id',
    );
    e.notResent = true;
    assert.match(e.message, /it was refused before and was not sent again/, "the message does not follow the fields");
    const none = new StorybusError({ messageId: "m", attempts: 3, cause: new NoAnswerError(new Error("connection reset")) });
    assert.equal(none.message, "message m: no answer from the bus: connection reset after 3 attempts: not delivered yet, and not kept: no outbox");
    assert.ok(none.temporary() && !none.refused() && !none.needsAlert());
  });

  it("tells final refusals from temporary failures by status", () => {
    for (const status of [400, 403, 404, 409, 413, 422]) {
      const e = new StorybusError({ status });
      assert.ok(e.refused() && !e.temporary(), `${status}`);
    }
    for (const status of [408, 429, 500, 502, 503, 504]) {
      const e = new StorybusError({ status });
      assert.ok(!e.refused() && e.temporary(), `${status}`);
    }
    const unauthorized = new StorybusError({ status: 401 });
    assert.ok(!unauthorized.refused() && !unauthorized.temporary() && unauthorized.needsAlert());
  });

  it("makes an untrusted certificate configuration, not a failure to retry", () => {
    const tlsError = Object.assign(new Error("unable to verify the first certificate"), { code: "UNABLE_TO_VERIFY_LEAF_SIGNATURE" });
    const e = new StorybusError({ cause: new UntrustedCertificateError(new TypeError("fetch failed", { cause: tlsError })), kept: true });
    assert.ok(!e.temporary() && e.needsAlert() && !e.refused());
    assert.equal(e.class(), "not-allowed");
    assert.match(e.advice(), /^configuration: give the client the CA .*; kept in the outbox/);
  });

  it("is found through causes by the helpers", () => {
    const e = new StorybusError({
      status: 409,
      rule: "commit.contention",
      violations: [
        { source: "policy", rule: "commit.contention", message: "a" },
        { source: "policy", rule: "tenant.other", message: "b" },
      ],
    });
    const wrapped = new Error("publishing failed", { cause: e });
    assert.equal(asError(wrapped), e);
    assert.equal(statusOf(wrapped), 409);
    assert.equal(ruleOf(wrapped), "commit.contention");
    assert.ok(hasRule(wrapped, "tenant.other") && !hasRule(wrapped, "sequence.stale"));
    assert.ok(isRefused(wrapped));
    assert.equal(statusOf(new Error("other")), 0);
    assert.ok(e instanceof Error && e.name === "StorybusError");
  });
});

describe("RetryPolicy", () => {
  it("backs off exponentially with jitter, capped at 30 s", () => {
    const p = defaultRetryPolicy();
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6, 7, 8].map((n) => backoff(p, n, 0)),
      [250, 500, 1000, 2000, 4000, 8000, 15000, 15000],
    );
    assert.equal(backoff(p, 1, 0.999999), 250 + 250 * 0.999999);
    assert.equal(backoff({}, 20, 1), 30_000);
  });

  it("covers at least the 30 s of message.in_flight with its defaults, and refuses a policy that does not", () => {
    assert.ok(minTotalWait({}) >= MIN_RETRY_WINDOW_MS);
    assert.equal(minTotalWait({}), 250 + 500 + 1000 + 2000 + 4000 + 8000 + 15000 * 3);
    validateRetryPolicy({});
    assert.throws(() => validateRetryPolicy({ attempts: 3 }), /can give up in under 30 s/);
  });
});
