"""The retry policy: how often and how long a message is retried."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RetryPolicy", "MIN_RETRY_WINDOW"]

#: The shortest time, in seconds, a policy must keep retrying: a message the
#: bus recorded but did not confirm is answered 503 message.in_flight for up
#: to 30 s.
MIN_RETRY_WINDOW = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long the client retries a message whose outcome is
    unknown or temporarily refused (timeouts, network errors, 408, 429, 5xx).

    The wait before the n-th retry is a random duration between half and all
    of ``min(initial × 2ⁿ⁻¹, max_wait)``: with the defaults 0.25–0.5 s,
    0.5–1 s, 1–2 s, … up to 15–30 s. A longer Retry-After is honoured.
    """

    #: The nominal first wait, in seconds.
    initial: float = 0.5
    #: The cap of every wait, in seconds.
    max_wait: float = 30.0
    #: The most times a message is sent before it is kept in the outbox: 10
    #: waits at least 60 s in all (at most about 2 minutes), more than the
    #: 30 s the bus may need to release a message recorded but not yet
    #: published.
    attempts: int = 10
    #: The longest Retry-After, in seconds, the client waits for; a longer
    #: one (a daily quota) ends the retries at once and the message is kept.
    max_retry_after: float = 300.0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.max_wait <= 0 or self.attempts < 1 or self.max_retry_after <= 0:
            raise ValueError("a retry policy needs positive waits and at least one attempt")

    def backoff(self, n: int, jitter: float) -> float:
        """Returns the wait in seconds before retry ``n`` (n ≥ 1), for a
        jitter fraction in [0, 1)."""
        base = min(self.initial * 2.0 ** max(n - 1, 0), self.max_wait)
        j = min(max(jitter, 0.0), 1.0)
        return base / 2 + base / 2 * j

    def min_total_wait(self) -> float:
        """Returns the shortest time the policy spends waiting before it
        gives up: every wait at its lowest."""
        return sum(self.backoff(n, 0.0) for n in range(1, self.attempts))

    def validate(self) -> None:
        """Raises :class:`ValueError` for a policy that can give up before
        :data:`MIN_RETRY_WINDOW` even with the shortest waits."""
        if self.min_total_wait() < MIN_RETRY_WINDOW:
            raise ValueError("the retry policy can give up in under 30 s: raise attempts or initial")
