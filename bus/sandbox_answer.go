package bus

import (
	"strconv"
	"strings"
	"time"

	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/rules"
)

// SandboxAnswerHeader asks a sandbox workspace for an answer to a publish
// request instead of publishing it: a refusal's rule id, or SandboxLost.
// A workspace that is not a sandbox refuses it (sandbox.not_enabled).
const SandboxAnswerHeader = "Storybus-Sandbox-Answer"

// SandboxLost, as the SandboxAnswerHeader, asks a sandbox workspace to
// publish the message as usual and then drop the connection without an
// answer: the lost answer a producer's retry must recover from (it gets
// 200 duplicate).
const SandboxLost = "lost"

// notPublishAnswers are the catalogued rules that only the token and
// consumer routes answer with, and the sandbox's own rules, which a sandbox
// workspace never answers a valid header with: no publish request can
// provoke them.
var notPublishAnswers = map[string]bool{
	rules.AuthCredentialsInvalid: true,
	rules.AuthAttemptsExceeded:   true,
	rules.AuthRequestInvalid:     true,
	rules.AuthGrantUnsupported:   true,
	rules.AuthScopeInvalid:       true,
	rules.ConsumerRequestInvalid: true,
	rules.ConsumerAckInvalid:     true,
	rules.GrantFamily:            true,
	rules.ConsumerNameTaken:      true,
	rules.ConsumerLimitReached:   true,
	rules.SandboxNotEnabled:      true,
	rules.SandboxAnswerUnknown:   true,
}

// sandboxPaths are the paths a provoked answer names: the member the bus's
// real answer names for the rule. Rules that name no member (the request's,
// the connection's, the store's) have none; the SOM schemas' rules whose
// member varies name the payload, where the family's schema applies.
var sandboxPaths = map[string]string{
	rules.MessageIDReused:              "/message_id",
	rules.MessageSuperseded:            "/payload/sequence_number",
	rules.SequenceStale:                "/payload/sequence_number",
	rules.SequenceTerminal:             "/payload/sequence_number",
	rules.CommitContention:             "/payload/story_id",
	rules.StoryNotOwner:                "/system_id",
	rules.ConformanceKillReason:        "/payload/kill_reason",
	rules.ConformancePublishedHeadline: "/payload/headline",
	"envelope.const":                   "/som_version",
	"envelope.enum":                    "/message_type",
	"envelope.format.date-time":        "/timestamp",
	"envelope.format.uuid":             "/message_id",
	"envelope.pattern":                 "/system_id",
	"envelope.type":                    "/payload",
}

// sandboxAnswer runs right after authentication (stage 3), so that a
// request with a bad token is refused as usual. A request without the
// SandboxAnswerHeader goes on. On a workspace that is not a sandbox the
// header is refused; on a sandbox, the answer it names is written through
// the same refusal code as the real one, and nothing is recorded or
// published; with SandboxLost, the request goes on and its accepted answer
// is dropped (see publishWith).
func (s *Server) sandboxAnswer(r *request) outcome {
	values := r.c.Request.Header.Values(SandboxAnswerHeader)
	if len(values) == 0 {
		return outcome{}
	}
	if !r.cfg.Sandbox {
		return refused(rules.New(rules.SandboxNotEnabled,
			"workspace "+r.ws.id+" is not a sandbox: remove the "+SandboxAnswerHeader+" header", ""))
	}
	if len(values) > 1 {
		return refused(rules.New(rules.SandboxAnswerUnknown, "send one "+SandboxAnswerHeader+" header, not "+strconv.Itoa(len(values)), ""))
	}
	id := strings.TrimSpace(values[0])
	if id == SandboxLost {
		r.lost = true
		return outcome{}
	}
	v, why := s.provoked(r, id)
	if why != "" {
		return refused(rules.New(rules.SandboxAnswerUnknown, why, ""))
	}
	refuseIn(r.c, r.cfg, s.sandboxRetryAfter(id), v)
	return outcome{answered: true}
}

// provoked returns the answer a sandbox gives for the rule id: its status
// and violation, or why the id names no answer of the publish routes.
func (s *Server) provoked(r *request, id string) (rules.Violation, string) {
	message := "provoked by " + SandboxAnswerHeader + "; nothing was recorded or published"
	if tr, ok := r.cfg.TenantRule(id); ok {
		if tr.Status == 0 {
			return rules.Violation{}, id + " is a warning of the workspace's own policy, never an answer's status"
		}
		return rules.Violation{Source: rules.SourcePolicy, Rule: id, Message: message}, ""
	}
	rule, ok := rules.Lookup(id)
	switch {
	case id == "":
		return rules.Violation{}, SandboxAnswerHeader + " is empty: name a rule id, or " + SandboxLost
	case !ok:
		return rules.Violation{}, id + " is not a rule id of the catalogue or of the workspace's own policy"
	case notPublishAnswers[id]:
		return rules.Violation{}, id + " is not an answer of the publish routes"
	case rule.Status == 0:
		return rules.Violation{}, id + " is a warning: it appears under tolerated in a 202, never as an answer's status"
	}
	path, named := sandboxPaths[id]
	if !named && rule.Source == rules.SourceSchema && !strings.HasPrefix(id, "envelope.") {
		path = "/payload"
	}
	return rules.New(id, message, path), ""
}

// sandboxRetryAfter is the Retry-After of a provoked 429 or 503: what the
// bus answers at the start of the wait it asks for. A daily quota is
// renewed at the next UTC midnight; an attempt recorded a moment ago is
// in flight for the whole lease; the others are worth a retry a second
// later.
func (s *Server) sandboxRetryAfter(id string) time.Duration {
	switch id {
	case rules.QuotaExceeded:
		now := s.opts.Clock.Now()
		return limits.NextMidnight(now).Sub(now)
	case rules.MessageInFlight:
		return publish.Lease
	}
	return time.Second
}
