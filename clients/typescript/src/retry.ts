/**
 * RetryPolicy says how often and how long the client retries a message
 * whose outcome is unknown or temporarily refused (timeouts, network
 * errors, 408, 429, 5xx). Fields left out take the defaults.
 *
 * The wait before the n-th retry is a random duration between half and all
 * of min(initialMs × 2ⁿ⁻¹, maxMs): with the defaults 0.25–0.5 s, 0.5–1 s,
 * 1–2 s, … up to 15–30 s. A Retry-After longer than that wait is honoured.
 */
export interface RetryPolicy {
  /** initialMs is the nominal first wait; default 500 ms. */
  initialMs?: number;
  /** maxMs caps every wait; default 30 s. */
  maxMs?: number;
  /**
   * attempts is the most times a message is sent before it is kept in the
   * outbox; default 10, which waits at least 60 s in all (at most about 2
   * minutes), more than the 30 s the bus may need to release a message
   * recorded but not yet published.
   */
  attempts?: number;
  /**
   * maxRetryAfterMs is the longest Retry-After the client waits for; a
   * longer one (a daily quota, for example) ends the retries at once and
   * the message is kept. Default 5 minutes.
   */
  maxRetryAfterMs?: number;
}

/**
 * MIN_RETRY_WINDOW_MS is the shortest time a policy must keep retrying: a
 * message the bus recorded but did not confirm is answered 503
 * message.in_flight for up to 30 s.
 */
export const MIN_RETRY_WINDOW_MS = 30_000;

/** defaultRetryPolicy returns the documented policy. */
export function defaultRetryPolicy(): Required<RetryPolicy> {
  return { initialMs: 500, maxMs: 30_000, attempts: 10, maxRetryAfterMs: 5 * 60_000 };
}

/** withDefaults fills the fields a policy leaves out (or sets to 0 or less). */
export function withDefaults(policy: RetryPolicy = {}): Required<RetryPolicy> {
  const d = defaultRetryPolicy();
  const pick = (v: number | undefined, dv: number) => (v !== undefined && v > 0 ? v : dv);
  return {
    initialMs: pick(policy.initialMs, d.initialMs),
    maxMs: pick(policy.maxMs, d.maxMs),
    attempts: Math.floor(pick(policy.attempts, d.attempts)),
    maxRetryAfterMs: pick(policy.maxRetryAfterMs, d.maxRetryAfterMs),
  };
}

/**
 * backoff returns the wait in milliseconds before retry n (n ≥ 1), for a
 * jitter fraction j in [0, 1).
 */
export function backoff(policy: RetryPolicy, n: number, j: number): number {
  const p = withDefaults(policy);
  let base = p.initialMs;
  for (let i = 1; i < n && base < p.maxMs; i++) {
    base *= 2;
  }
  base = Math.min(base, p.maxMs);
  j = Math.min(Math.max(j, 0), 1);
  return base / 2 + (base / 2) * j;
}

/**
 * minTotalWait returns the shortest time in milliseconds the policy spends
 * waiting before it gives up: every wait at its lowest.
 */
export function minTotalWait(policy: RetryPolicy): number {
  const p = withDefaults(policy);
  let total = 0;
  for (let n = 1; n < p.attempts; n++) {
    total += backoff(p, n, 0);
  }
  return total;
}

/**
 * validateRetryPolicy throws for a policy that gives up before
 * MIN_RETRY_WINDOW_MS even with the shortest waits.
 */
export function validateRetryPolicy(policy: RetryPolicy): void {
  if (minTotalWait(policy) < MIN_RETRY_WINDOW_MS) {
    throw new RangeError("storybus: the retry policy can give up in under 30 s: raise attempts or initialMs");
  }
}
