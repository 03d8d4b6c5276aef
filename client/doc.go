// Package client is the Go client of the storybus publish and consumer
// APIs. It implements the retry discipline of the bus's documentation for
// producers, so that a newsroom system loses no message and never sends two
// messages about one change:
//
//   - a message is built once and every retry sends the identical bytes
//     (Message, Build);
//   - only timeouts, network errors, 429 (honouring Retry-After) and 5xx
//     are retried, with exponential backoff and jitter (0.5 s, 1 s, 2 s …
//     capped at 30 s), for a bounded number of attempts that covers at least
//     30 s (RetryPolicy);
//   - a 401 is retried once with a fresh token (ClientCredentials), then the
//     client stops;
//   - 400, 403, 409 and 413 are never retried, and a snapshot refused with
//     409 is never sent again: the answer says to rebuild it from current
//     state with a new message_id (Error);
//   - while one of a story's messages is retried, the story's next messages
//     wait; other stories carry on (Client.Send);
//   - a message whose retries are exhausted is kept, unchanged, in a durable
//     Outbox on disk, and resent later in story order (Client.Resend).
//
// Errors are *Error values that expose the HTTP status, the rule and the
// violations of the bus's answer, with helpers built on errors.As and the
// user-facing classes of the documentation (Error.Class, Error.UserMessage).
//
// Consumers pull with Consumer, which long-polls the bus's HTTP pull API,
// acknowledges explicitly and drops the duplicates that at-least-once
// delivery brings, by message_id, with bounded memory (Dedup).
package client
