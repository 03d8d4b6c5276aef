package som

import (
	"strings"
	"time"

	"github.com/storybus/storybus/rules"
)

// conformance checks the rules of SOM 1.0 that JSON Schema cannot say well.
// Every rule compares members of the message with each other, never with the
// clock, so a retry days later gets the same answer.
//
// Refusals (400):
//   - conformance.kill_reason: a story.context whose state is killed needs a
//     kill_reason that is not blank. Path: the kill_reason, or the payload
//     when kill_reason is missing.
//   - conformance.published_headline: a story.context whose state is
//     published or updated needs a headline that is not blank. Path: the
//     headline. (A missing headline is story-context.required.)
//
// Warnings:
//   - conformance.embargo_past: a story.context's embargo_until is earlier
//     than the envelope's timestamp, so the embargo had already lifted when
//     the message was built. Path: the embargo_until.
//   - conformance.kill_reason_unused: a story.context has a kill_reason but
//     its state is not killed; consumers ignore it. Path: the kill_reason.
//   - conformance.rights_expired: an asset.reference's rights.expires_at is
//     earlier than the envelope's timestamp, so the usage rights had already
//     ended when the message was built. Path: the expires_at.
type conformance struct {
	doc     map[string]any
	payload map[string]any
	// schema holds the schema violations already found; a rule is only
	// evaluated over members that have none.
	schema   []rules.Violation
	refusals []rules.Violation
	warnings []rules.Violation
}

func (c *conformance) check(family string) {
	switch family {
	case FamilyStoryContext:
		c.killReason()
		c.publishedHeadline()
		c.embargoPast()
	case FamilyAssetReference:
		c.rightsExpired()
	}
}

// valid reports whether the schemas found nothing wrong at or under each
// path.
func (c *conformance) valid(paths ...string) bool {
	for _, v := range c.schema {
		for _, p := range paths {
			if v.Path == p || strings.HasPrefix(v.Path, p+"/") {
				return false
			}
		}
	}
	return true
}

// str returns a payload member that is a string free of schema violations.
func (c *conformance) str(name string) (string, bool) {
	s, ok := c.payload[name].(string)
	return s, ok && c.valid(payloadPath+"/"+name)
}

func (c *conformance) refuse(rule, path, msg string) {
	c.refusals = append(c.refusals, rules.New(rule, msg, path))
}

func (c *conformance) warn(rule, path, msg string) {
	c.warnings = append(c.warnings, rules.New(rule, msg, path))
}

func (c *conformance) killReason() {
	state, ok := c.str("state")
	if !ok {
		return
	}
	_, present := c.payload["kill_reason"]
	reason, valid := c.str("kill_reason")
	switch {
	case state != "killed":
		if present && valid {
			c.warn(rules.ConformanceKillReasonUnused, payloadPath+"/kill_reason",
				"kill_reason is ignored unless state is 'killed'")
		}
	case !present:
		c.refuse(rules.ConformanceKillReason, payloadPath,
			"a killed story must have a kill_reason")
	case valid && strings.TrimSpace(reason) == "":
		c.refuse(rules.ConformanceKillReason, payloadPath+"/kill_reason",
			"a killed story must have a kill_reason that is not blank")
	}
}

func (c *conformance) publishedHeadline() {
	state, ok := c.str("state")
	if !ok || (state != "published" && state != "updated") {
		return
	}
	if h, ok := c.str("headline"); ok && strings.TrimSpace(h) == "" {
		c.refuse(rules.ConformancePublishedHeadline, payloadPath+"/headline",
			"a "+state+" story must have a headline that is not blank")
	}
}

func (c *conformance) embargoPast() {
	embargo, ok := c.str("embargo_until")
	if !ok {
		return
	}
	if c.before(embargo) {
		c.warn(rules.ConformanceEmbargoPast, payloadPath+"/embargo_until",
			"embargo_until is earlier than the message's timestamp: the embargo had already lifted")
	}
}

func (c *conformance) rightsExpired() {
	rights, ok := c.payload["rights"].(map[string]any)
	if !ok {
		return
	}
	path := payloadPath + "/rights/expires_at"
	expires, ok := rights["expires_at"].(string)
	if !ok || !c.valid(path) {
		return
	}
	if c.before(expires) {
		c.warn(rules.ConformanceRightsExpired, path,
			"rights.expires_at is earlier than the message's timestamp: the usage rights had already ended")
	}
}

// before reports whether the RFC 3339 time t is earlier than the envelope's
// timestamp. It is false when either does not parse: a date-time the schema
// accepts but Go cannot represent, such as a leap second, gets no warning.
func (c *conformance) before(t string) bool {
	ts, ok := c.doc["timestamp"].(string)
	if !ok || !c.valid("/timestamp") {
		return false
	}
	at, err1 := parseTime(t)
	stamp, err2 := parseTime(ts)
	return err1 == nil && err2 == nil && at.Before(stamp)
}

// parseTime parses an RFC 3339 date-time, whose 'T' and 'Z' may be lower
// case.
func parseTime(s string) (time.Time, error) {
	return time.Parse(time.RFC3339Nano, strings.ToUpper(s))
}
