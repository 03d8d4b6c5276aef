// Package rules is the catalogue of every rule id the bus can answer with:
// its HTTP status, its source, what it means and how a producer fixes it.
//
// The catalogue is the single source of truth for refusals and warnings. The
// HTTP layer maps a Violation to an answer through it, docs/rules.md is
// generated from it, and tests fail when the bus emits a rule it lacks.
package rules

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Source says who refuses: SOM 1.0 (schema, conformance), SOM's snapshot
// order rules (sequence), or the bus's own rules (policy).
type Source string

// The sources of SPEC §3.2.
const (
	SourceSchema      Source = "schema"
	SourceConformance Source = "conformance"
	SourceSequence    Source = "sequence"
	SourcePolicy      Source = "policy"
)

// Rule is one catalogue entry.
type Rule struct {
	// ID is stable: producers branch on it.
	ID string
	// Status is the HTTP status of a refusal under this rule. A rule that
	// is only ever a warning has Status 0.
	Status int
	// Source is who says no.
	Source Source
	// Stage is the stage of SPEC §3.2 that decides the rule.
	Stage int
	// Warning is true when the rule can be reported under "tolerated".
	Warning bool
	// Retry says whether retrying the same message can help.
	Retry string
	// Meaning is one sentence for people.
	Meaning string
	// Fix says what the producer should do.
	Fix string
	// OAuth2Error is the OAuth2 error code (RFC 6749 §5.2) the token
	// endpoint answers with for this rule; empty for a rule the token
	// endpoint never answers with.
	OAuth2Error string
	// OAuth2Status is the token endpoint's status for the rule when it
	// differs from Status: RFC 6749 answers every error but
	// invalid_client with 400.
	OAuth2Status int
}

// Violation is one entry of an answer's "violations" or "tolerated" list.
type Violation struct {
	Source  Source `json:"source"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Path    string `json:"path,omitempty"`
}

// Policy, sequence and conformance rule ids used by the bus's Go code.
const (
	MessageTooLarge        = "message.too_large"
	AuthTokenMissing       = "auth.token.missing"
	AuthTokenInvalid       = "auth.token.invalid"
	AuthTokenExpired       = "auth.token.expired"
	AuthTokenRevoked       = "auth.token.revoked"
	AuthCredentialsInvalid = "auth.credentials.invalid"
	AuthAttemptsExceeded   = "auth.attempts.exceeded"
	AuthRequestInvalid     = "auth.request.invalid"
	AuthGrantUnsupported   = "auth.grant_type.unsupported"
	AuthScopeInvalid       = "auth.scope.invalid"
	ConnectionInactive     = "connection.inactive"
	WorkspaceMismatch      = "workspace.mismatch"
	IAMRoleUnverified      = "iam.role.unverified"
	RequestBlocked         = "request.blocked"
	RateLimited            = "rate.limited"
	QuotaExceeded          = "quota.exceeded"
	MessageNotJSON         = "message.not_json"
	GrantSystemID          = "grant.system_id"
	GrantMessageType       = "grant.message_type"
	MessageIDReused        = "message_id.reused"
	MessageInFlight        = "message.in_flight"
	MessageSuperseded      = "message.superseded"
	SequenceStale          = "sequence.stale"
	SequenceTerminal       = "sequence.terminal"
	SequenceGap            = "sequence.gap"
	SequenceStart          = "sequence.start"
	StoryNotOwner          = "story.not_owner"
	PolicyTimeout          = "policy.timeout"
	PolicyBusy             = "policy.busy"
	WorkspaceBusy          = "workspace.busy"
	CommitContention       = "commit.contention"
	BusPublishFailed       = "bus.publish_failed"
	WorkspaceStorageFull   = "workspace.storage_full"
	RegistryUnavailable    = "registry.unavailable"
	BusUnavailable         = "bus.unavailable"
	SandboxNotEnabled      = "sandbox.not_enabled"
	SandboxAnswerUnknown   = "sandbox.answer_unknown"

	// Rules of the consumer routes (HTTP pull delivery).
	ConsumerRequestInvalid = "consumer.request_invalid"
	ConsumerAckInvalid     = "consumer.ack_invalid"
	GrantFamily            = "grant.family"
	ConsumerNameTaken      = "consumer.name_taken"
	ConsumerLimitReached   = "consumer.limit_reached"
)

const (
	retryNo      = "No"
	retryBackoff = "Yes, with backoff"
)

// The OAuth2 error codes of the token endpoint (RFC 6749 §5.2;
// temporarily_unavailable is §4.1.2.1's, for a bus that cannot decide).
const (
	OAuth2InvalidRequest         = "invalid_request"
	OAuth2InvalidClient          = "invalid_client"
	OAuth2UnauthorizedClient     = "unauthorized_client"
	OAuth2UnsupportedGrantType   = "unsupported_grant_type"
	OAuth2InvalidScope           = "invalid_scope"
	OAuth2TemporarilyUnavailable = "temporarily_unavailable"
)

// policyRules are the bus's own rules and SOM's snapshot-order rules.
var policyRules = []Rule{
	{ID: MessageTooLarge, Status: http.StatusRequestEntityTooLarge, Source: SourcePolicy, Stage: 2, Retry: retryNo,
		Meaning: "The body is over 240,000 bytes.",
		Fix:     "Send content by reference (body_ref, assets[].ref), not inline. Move media and long text out."},
	{ID: AuthTokenMissing, Status: http.StatusUnauthorized, Source: SourcePolicy, Stage: 3, Retry: "Once, with a new token",
		Meaning: "No bearer token was sent.",
		Fix:     "Get a token from POST /v1/tenants/{t}/tokens and send it as Authorization: Bearer <token>."},
	{ID: AuthTokenInvalid, Status: http.StatusUnauthorized, Source: SourcePolicy, Stage: 3, Retry: "Once, with a new token",
		Meaning: "The token is malformed, badly signed, or not for this bus; or it is bound to a client certificate (mutual TLS) that this request was not sent with.",
		Fix:     "Get a new token, and send a certificate-bound token over the certificate it was issued to. If a fresh token is refused too, the client is misconfigured: stop and alert."},
	{ID: AuthTokenExpired, Status: http.StatusUnauthorized, Source: SourcePolicy, Stage: 3, Retry: "Once, with a new token",
		Meaning: "The token has expired.",
		Fix:     "Get a new token and retry once."},
	{ID: AuthTokenRevoked, Status: http.StatusUnauthorized, Source: SourcePolicy, Stage: 3, Retry: "Once, with a new token",
		Meaning: "The token was issued before the connection's last secret rotation.",
		Fix:     "Get a new token with the connection's current secret and retry once."},
	{ID: AuthCredentialsInvalid, Status: http.StatusUnauthorized, Source: SourcePolicy, Stage: 3, Retry: retryNo, OAuth2Error: OAuth2InvalidClient,
		Meaning: "Token endpoint only: the client did not authenticate: no credentials, an unknown client id, a wrong secret, Basic credentials that are malformed or not form-urlencoded, or a client certificate that is no connection's.",
		Fix:     "Check the connection's credentials Secret; after a rotation, use the new secret. Send the client id and secret with HTTP Basic (each form-urlencoded first) or as client_id and client_secret in the body."},
	{ID: AuthAttemptsExceeded, Status: http.StatusTooManyRequests, Source: SourcePolicy, Stage: 3, Retry: "After Retry-After", OAuth2Error: OAuth2InvalidClient,
		Meaning: "Token endpoint only: too many failed attempts with this client id, or from this source address, within the window. Every attempt is refused until the lockout ends, even with the right secret.",
		Fix:     "Fix the client's credentials, then retry after Retry-After. Tokens already issued keep working. If nobody you know failed, someone is guessing the secret: rotate it."},
	{ID: SandboxNotEnabled, Status: http.StatusBadRequest, Source: SourcePolicy, Stage: 3, Retry: retryNo,
		Meaning: "The request carries the Storybus-Sandbox-Answer header, and the workspace is not a sandbox. Nothing was recorded or published.",
		Fix:     "A bug in your configuration: the header belongs in tests against a sandbox workspace (storybus dev, or a Tenant with spec.sandbox). Never send it to a production workspace."},
	{ID: SandboxAnswerUnknown, Status: http.StatusBadRequest, Source: SourcePolicy, Stage: 3, Retry: retryNo,
		Meaning: "Sandbox workspaces only: the Storybus-Sandbox-Answer header names no answer of the publish routes: not a catalogued refusal of theirs, not a refusal of the workspace's own modules, and not lost. Nothing was recorded or published.",
		Fix:     "Name one refusal's rule id from the catalogue (warnings are never an answer), or lost, in one Storybus-Sandbox-Answer header."},
	{ID: AuthRequestInvalid, Status: http.StatusBadRequest, Source: SourcePolicy, Stage: 3, Retry: retryNo, OAuth2Error: OAuth2InvalidRequest,
		Meaning: "Token endpoint only: the token request is malformed: its body is not application/x-www-form-urlencoded or is over 4,096 bytes, grant_type is missing, a parameter is sent twice, client_secret comes without client_id, or the client authenticated in two ways at once (HTTP Basic and client_secret in the body, or a client_id in the body other than the Basic one).",
		Fix:     "A bug in the client: POST grant_type=client_credentials form-encoded, with the client id and secret either as HTTP Basic or as client_id and client_secret in the body, never both."},
	{ID: AuthGrantUnsupported, Status: http.StatusBadRequest, Source: SourcePolicy, Stage: 3, Retry: retryNo, OAuth2Error: OAuth2UnsupportedGrantType,
		Meaning: "Token endpoint only: grant_type is not client_credentials, the only grant the bus issues tokens for.",
		Fix:     "Send grant_type=client_credentials."},
	{ID: AuthScopeInvalid, Status: http.StatusBadRequest, Source: SourcePolicy, Stage: 3, Retry: retryNo, OAuth2Error: OAuth2InvalidScope,
		Meaning: "Token endpoint only: the request asked for a scope. The bus has no scopes: what a token may do is decided by its connection's grants.",
		Fix:     "Send no scope parameter (an empty one is ignored)."},
	{ID: ConnectionInactive, Status: http.StatusForbidden, Source: SourcePolicy, Stage: 4, Retry: retryNo, OAuth2Error: OAuth2UnauthorizedClient, OAuth2Status: http.StatusBadRequest,
		Meaning: "The connection is not active. At the token endpoint: 400 unauthorized_client.",
		Fix:     "Configuration: ask a workspace admin to activate the connection."},
	{ID: WorkspaceMismatch, Status: http.StatusForbidden, Source: SourcePolicy, Stage: 4, Retry: retryNo,
		Meaning: "The token was issued for another workspace.",
		Fix:     "Configuration: publish to the workspace the token was issued for, or get a token from this one."},
	{ID: IAMRoleUnverified, Status: http.StatusForbidden, Source: SourcePolicy, Stage: 4, Retry: retryNo,
		Meaning: "The connection's AWS IAM role has not been verified by a workspace admin.",
		Fix:     "Configuration: ask a workspace admin to verify the role."},
	{ID: RequestBlocked, Status: http.StatusForbidden, Source: SourcePolicy, Stage: 5, Retry: retryNo,
		Meaning: "The workspace's firewall refused the request (client address, content type, JSON depth or a blocked pattern).",
		Fix:     "Check what your client sends; ask the workspace admin if it is a normal message."},
	{ID: RateLimited, Status: http.StatusTooManyRequests, Source: SourcePolicy, Stage: 6, Retry: retryBackoff,
		Meaning: "The connection is over its request rate.",
		Fix:     "Retry the same message later, honouring Retry-After."},
	{ID: QuotaExceeded, Status: http.StatusTooManyRequests, Source: SourcePolicy, Stage: 6, Retry: retryBackoff,
		Meaning: "The connection has used its daily allowance of accepted messages (UTC day).",
		Fix:     "Retry the same message after Retry-After (the next UTC midnight), or ask for a larger quota."},
	{ID: MessageNotJSON, Status: http.StatusBadRequest, Source: SourcePolicy, Stage: 7, Retry: retryNo,
		Meaning: "The body is not one JSON object: not JSON, not UTF-8, not an object, trailing data, a duplicate member name, nesting deeper than 64 levels, a number outside IEEE 754 double range, or a Content-Type other than JSON.",
		Fix:     "A bug in your product: send one JSON object with Content-Type: application/json."},
	{ID: GrantSystemID, Status: http.StatusForbidden, Source: SourcePolicy, Stage: 9, Retry: retryNo,
		Meaning: "The message's system_id is outside the connection's grants.",
		Fix:     "Configuration: publish as a granted system_id, or ask a workspace admin to extend the Grant."},
	{ID: GrantMessageType, Status: http.StatusForbidden, Source: SourcePolicy, Stage: 9, Retry: retryNo,
		Meaning: "The message_type is outside the connection's grants.",
		Fix:     "Configuration: ask a workspace admin to extend the Grant."},
	{ID: ConsumerRequestInvalid, Status: http.StatusBadRequest, Source: SourcePolicy, Stage: 7, Retry: retryNo,
		Meaning: "Consumer routes only: the request is malformed. A consumer name that is not 1 to 64 letters, digits, '-' or '_', a max outside 1 to 100, a wait that is not a duration from 0s to 20s, an unknown family, an acks body that is not {\"ack_ids\":[…]} with 1 to 1,000 ids, or an ack action other than ack, nak, in_progress and term (only nak takes a delay, up to 1h).",
		Fix:     "A bug in the consumer: send the parameters the consumer API documents."},
	{ID: ConsumerAckInvalid, Status: http.StatusBadRequest, Source: SourcePolicy, Stage: 7, Retry: retryNo,
		Meaning: "Consumer routes only: an ack_id is malformed, or was not issued to this consumer of this workspace. Nothing in the request was acknowledged.",
		Fix:     "Acknowledge only the ack_ids of this consumer's own deliveries, unchanged. The others are redelivered after the ack timeout."},
	{ID: GrantFamily, Status: http.StatusForbidden, Source: SourcePolicy, Stage: 9, Retry: retryNo,
		Meaning: "Consumer routes only: the consumer asked for a family outside the connection's consume grant, or the connection may consume nothing.",
		Fix:     "Configuration: ask only for granted families, or ask a workspace admin to extend the Grant's consume.families."},
	{ID: ConsumerNameTaken, Status: http.StatusConflict, Source: SourcePolicy, Stage: 9, Retry: retryNo,
		Meaning: "Consumer routes only: the consumer name belongs to another connection, or to a durable consumer created outside the HTTP API.",
		Fix:     "Configuration: choose another consumer name. A consumer name belongs to the connection that first used it."},
	{ID: ConsumerLimitReached, Status: http.StatusForbidden, Source: SourcePolicy, Stage: 9, Retry: retryNo,
		Meaning: "Consumer routes only: a pull named a new consumer, and the connection already has the most durable consumers it may have (10 unless the bus is configured otherwise).",
		Fix:     "Configuration: pull with one of the connection's existing consumer names. A consumer idle for the inactivity threshold (7 days unless configured otherwise) is removed and frees its place."},
	{ID: MessageIDReused, Status: http.StatusConflict, Source: SourcePolicy, Stage: 10, Retry: retryNo,
		Meaning: "This message_id was used for a different message (content is compared as canonical JSON, timestamp included).",
		Fix:     "A bug: every new message needs a new message_id. A retry must resend the identical message."},
	{ID: MessageInFlight, Status: http.StatusServiceUnavailable, Source: SourcePolicy, Stage: 10, Retry: retryBackoff,
		Meaning: "An earlier attempt of this message was recorded less than 30 seconds ago and is not confirmed published yet. Nothing new was accepted.",
		Fix:     "Retry with the same message_id and body, with backoff, for at least 30 seconds."},
	{ID: MessageSuperseded, Status: http.StatusConflict, Source: SourcePolicy, Stage: 10, Retry: retryNo,
		Meaning: "A retried snapshot was recorded but never published, and its story has accepted a newer snapshot since. It is not delivered.",
		Fix:     "Nothing: the newer snapshot supersedes it. For a change, send a new snapshot from current state with a new message_id."},
	{ID: SequenceStale, Status: http.StatusConflict, Source: SourceSequence, Stage: 11, Retry: "Not this message",
		Meaning: "The snapshot's sequence_number does not exceed the story's latest accepted one.",
		Fix:     "Rebuild a complete snapshot from current state with the next sequence_number and a new message_id."},
	{ID: SequenceTerminal, Status: http.StatusConflict, Source: SourceSequence, Stage: 11, Retry: "Not this message",
		Meaning: "The story's latest accepted snapshot is killed; a killed story accepts no more snapshots.",
		Fix:     "A terminal story stays terminal: tell the user."},
	{ID: SequenceGap, Source: SourceSequence, Stage: 11, Warning: true, Retry: "-",
		Meaning: "Warning: the sequence_number jumps by more than one over the story's latest accepted snapshot.",
		Fix:     "Nothing needed: the snapshot was accepted. Check your product does not skip snapshots."},
	{ID: SequenceStart, Source: SourceSequence, Stage: 11, Warning: true, Retry: "-",
		Meaning: "Warning: the story's first accepted snapshot has a sequence_number other than 1.",
		Fix:     "Nothing needed: the snapshot was accepted. Start new stories at 1."},
	{ID: StoryNotOwner, Status: http.StatusConflict, Source: SourcePolicy, Stage: 12, Warning: true, Retry: retryNo,
		Meaning: "The publishing system does not own the story. A warning when the workspace tolerates it (the default), 409 when it refuses.",
		Fix:     "Publish from the story's owner, or ask a workspace admin for a hand-off."},
	{ID: PolicyTimeout, Status: http.StatusServiceUnavailable, Source: SourcePolicy, Stage: 12, Retry: retryBackoff,
		Meaning: "The workspace's own policy modules did not decide within the workspace's policy deadline (policyTimeout, 100 ms by default), or their built-in calls went past their cost bounds (docs/policy.md). Nothing was recorded or published.",
		Fix:     "Retry with the same message_id and body, honouring Retry-After. If it persists, the workspace's policy is too slow for this message: tell the workspace admin."},
	{ID: PolicyBusy, Status: http.StatusServiceUnavailable, Source: SourcePolicy, Stage: 12, Retry: retryBackoff,
		Meaning: "As many evaluations of the workspace's own policy modules as the workspace may run at once in this bus (policyConcurrency, by default half its cores) were running. Nothing was recorded or published; nothing waits in a queue.",
		Fix:     "Retry with the same message_id and body, honouring Retry-After. If it persists, the workspace publishes faster than its policy decides: tell the workspace admin."},
	{ID: WorkspaceBusy, Status: http.StatusServiceUnavailable, Source: SourcePolicy, Stage: 3, Retry: retryBackoff,
		Meaning: "The workspace had as many publish requests past authentication in this bus as it may (requestConcurrency, 64 by default): the bound keeps one workspace's flood from holding the bus's memory and store for the others. Nothing was read, recorded or published; nothing waits in a queue.",
		Fix:     "Retry with the same message_id and body, honouring Retry-After. If it persists, the workspace sends more at once than it is configured for: spread the producers' sends, or ask the platform for a higher requestConcurrency."},
	{ID: CommitContention, Status: http.StatusConflict, Source: SourcePolicy, Stage: 13, Retry: "With a fresh snapshot",
		Meaning: "Another writer changed the story at the same moment. Nothing was recorded for this message.",
		Fix:     "Rebuild the snapshot from current state and send it after a moment. If it keeps happening, two processes write one story."},
	{ID: BusPublishFailed, Status: http.StatusServiceUnavailable, Source: SourcePolicy, Stage: 13, Retry: retryBackoff,
		Meaning: "Publishing to the topic failed. When the store refused the publish, the message was not published and its record was removed; when the outcome is unknown (a timeout), the record stays and a retry finds out, so retrying is always safe.",
		Fix:     "Retry with the same message_id and body."},
	{ID: WorkspaceStorageFull, Status: http.StatusInsufficientStorage, Source: SourcePolicy, Stage: 13, Retry: "Later, with backoff",
		Meaning: "The workspace's topic holds as many bytes or messages as the platform allows it (the Tenant's spec.capacity.topic, the configuration's topic), or, on a bus pool, the idempotency records the pooled workspaces share on its NATS cluster are at the bound the pools there set (the largest BusPool spec.sharedRecords). The message was not published and nothing was recorded for it; every message accepted before is kept. Room comes back only when the platform raises the limit or retention ages messages (records: their idempotency window) out, so the answer carries no Retry-After.",
		Fix:     "Keep the message (a client's outbox) and retry the same message_id and body later, with backoff. Tell the platform team: the workspace needs a larger limit, or a shorter topic retention where the bus has one (consumers reading the topic free nothing); on a pool, the message says which limit it is."},
	{ID: RegistryUnavailable, Status: http.StatusServiceUnavailable, Source: SourcePolicy, Stage: 13, Retry: retryBackoff, OAuth2Error: OAuth2TemporarilyUnavailable,
		Meaning: "The record store is unreachable (at the token endpoint: the failed-attempt counters). Nothing was published, no token issued.",
		Fix:     "Retry with the same message_id and body."},
	{ID: BusUnavailable, Status: http.StatusServiceUnavailable, Source: SourcePolicy, Stage: 13, Retry: retryBackoff, OAuth2Error: OAuth2TemporarilyUnavailable,
		Meaning: "The bus hit an internal error and answered without publishing; the cause is in the bus's logs.",
		Fix:     "Retry with the same message_id and body."},
}

var (
	catalogueOnce sync.Once
	catalogue     []Rule
	byID          map[string]Rule
)

func load() {
	catalogueOnce.Do(func() {
		all := slices.Concat(policyRules, schemaRules, conformanceRules)
		sort.SliceStable(all, func(i, j int) bool {
			if all[i].Stage != all[j].Stage {
				return all[i].Stage < all[j].Stage
			}
			return all[i].ID < all[j].ID
		})
		byID = make(map[string]Rule, len(all))
		for _, r := range all {
			if _, dup := byID[r.ID]; dup {
				panic(fmt.Sprintf("rules: %q catalogued twice", r.ID))
			}
			byID[r.ID] = r
		}
		catalogue = all
	})
}

// All returns every catalogued rule, ordered by stage then id.
func All() []Rule {
	load()
	return slices.Clone(catalogue)
}

// Lookup returns the rule with the given id.
func Lookup(id string) (Rule, bool) {
	load()
	r, ok := byID[id]
	return r, ok
}

// Status returns the HTTP status of a refusal under the rule id, or 503 for
// an id the catalogue lacks, so that a programming error can never produce
// an undocumented answer.
func Status(id string) int {
	if r, ok := Lookup(id); ok && r.Status != 0 {
		return r.Status
	}
	return http.StatusServiceUnavailable
}

// TokenStatus returns the HTTP status of the token endpoint's OAuth2 error
// for the rule id, or 503 for a rule the token endpoint never answers with.
func TokenStatus(id string) int {
	r, ok := Lookup(id)
	switch {
	case !ok || r.OAuth2Error == "":
		return http.StatusServiceUnavailable
	case r.OAuth2Status != 0:
		return r.OAuth2Status
	}
	return r.Status
}

// TokenRules returns the rules the token endpoint answers with, in
// catalogue order.
func TokenRules() []Rule {
	var out []Rule
	for _, r := range All() {
		if r.OAuth2Error != "" {
			out = append(out, r)
		}
	}
	return out
}

// New returns a violation of the catalogued rule id, with its source.
func New(id, message, path string) Violation {
	r, _ := Lookup(id)
	src := r.Source
	if src == "" {
		src = SourcePolicy
	}
	return Violation{Source: src, Rule: id, Message: message, Path: path}
}

// Markdown renders the catalogue as docs/rules.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# Rule catalogue\n\n")
	b.WriteString("<!-- Generated from rules by `make docs`; do not edit by hand. -->\n\n")
	b.WriteString("Every refusal and warning the bus answers with has a stable rule id. Branch on `rule`, never on `message`.\n")
	b.WriteString("A rule marked *warning* appears under `tolerated` in a 202 answer; a status is given where the rule refuses.\n\n")
	b.WriteString("| rule | status | source | stage | retry? | meaning | how to fix |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range All() {
		status := "warning"
		if r.Status != 0 {
			status = fmt.Sprint(r.Status)
			if r.Warning {
				status += " or warning"
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %d | %s | %s | %s |\n",
			r.ID, status, r.Source, r.Stage, r.Retry, escapeCell(r.Meaning), escapeCell(r.Fix))
	}
	b.WriteString("\n## Token endpoint\n\n")
	b.WriteString("`POST /v1/tenants/{t}/tokens` answers its refusals as OAuth2 errors (RFC 6749 §5.2), ")
	b.WriteString("`{\"error\":\"…\",\"error_description\":\"…\",\"rule\":\"…\"}`, with `Cache-Control: no-store`. ")
	b.WriteString("`rule` is the rule id below, an extension member that OAuth2 clients ignore. ")
	b.WriteString("A 401 carries `WWW-Authenticate: Basic realm=\"storybus\"`; 429 and 503 carry `Retry-After`.\n\n")
	b.WriteString("| error | status | rule |\n")
	b.WriteString("|---|---|---|\n")
	for _, r := range TokenRules() {
		fmt.Fprintf(&b, "| `%s` | %d | `%s` |\n", r.OAuth2Error, TokenStatus(r.ID), r.ID)
	}
	return b.String()
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
