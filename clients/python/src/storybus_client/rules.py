"""Rule ids the client acts on.

Every rule the bus answers with is in the bus's rule catalogue
(docs/rules.md). A program branches on an error's ``rule``, never on the
text of a violation's ``message``.
"""

from __future__ import annotations

__all__ = [
    "MESSAGE_TOO_LARGE",
    "MESSAGE_NOT_JSON",
    "REQUEST_BLOCKED",
    "MESSAGE_ID_REUSED",
    "MESSAGE_IN_FLIGHT",
    "SUPERSEDED",
    "SEQUENCE_STALE",
    "SEQUENCE_TERMINAL",
    "STORY_NOT_OWNER",
    "COMMIT_CONTENTION",
    "RATE_LIMITED",
    "QUOTA_EXCEEDED",
    "OAUTH2_UNAUTHORIZED_CLIENT",
]

#: 413: the message is over 240,000 bytes.
MESSAGE_TOO_LARGE = "message.too_large"
#: 400: the body is not JSON.
MESSAGE_NOT_JSON = "message.not_json"
#: 403: refused by the workspace's firewall.
REQUEST_BLOCKED = "request.blocked"
#: 409: the message_id was used for a different message.
MESSAGE_ID_REUSED = "message_id.reused"
#: 503: an earlier attempt of this message is recorded and not yet confirmed.
MESSAGE_IN_FLIGHT = "message.in_flight"
#: 409: a retried snapshot was recorded but a newer one was accepted since.
SUPERSEDED = "message.superseded"
#: 409: the snapshot's sequence_number does not exceed the story's latest.
SEQUENCE_STALE = "sequence.stale"
#: 409: the story is killed and accepts no more snapshots.
SEQUENCE_TERMINAL = "sequence.terminal"
#: 409: another system owns the story.
STORY_NOT_OWNER = "story.not_owner"
#: 409: another writer changed the story at the same moment.
COMMIT_CONTENTION = "commit.contention"
#: 429: over the connection's request rate.
RATE_LIMITED = "rate.limited"
#: 429: over the connection's daily allowance.
QUOTA_EXCEEDED = "quota.exceeded"
#: The token endpoint's OAuth2 error (RFC 6749 §5.2) for a connection that
#: may not get tokens (connection.inactive): 400, but configuration.
OAUTH2_UNAUTHORIZED_CLIENT = "unauthorized_client"
