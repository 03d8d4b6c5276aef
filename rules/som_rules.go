package rules

import "net/http"

// Conformance rule ids of SOM 1.0 (source conformance, stage 8).
const (
	ConformanceKillReason        = "conformance.kill_reason"
	ConformancePublishedHeadline = "conformance.published_headline"
	ConformanceEmbargoPast       = "conformance.embargo_past"
	ConformanceKillReasonUnused  = "conformance.kill_reason_unused"
	ConformanceRightsExpired     = "conformance.rights_expired"
)

// schemaRule is a refusal by one of the SOM 1.0 schemas. Schema rule ids are
// <schema>.<keyword>[.<format>]; the SOM package's tests check that every id
// its schemas can produce is here, and nothing else is.
func schemaRule(id, meaning, fix string) Rule {
	return Rule{ID: id, Status: http.StatusBadRequest, Source: SourceSchema, Stage: 8, Retry: retryNo, Meaning: meaning, Fix: fix}
}

const (
	fixPath     = "A bug in your product: correct the member at path; resent unchanged, the message gets the same answer."
	fixRequired = "A bug in your product: add the member named in the message to the object at path."
	fixExtra    = "A bug in your product: remove the member at path. SOM 1.0 objects allow only the members their schema lists."
)

// schemaRules are the SOM 1.0 schema refusals, one per keyword (and format)
// that each schema uses.
var schemaRules = []Rule{
	// envelope
	schemaRule("envelope.additionalProperties",
		"The envelope has a member SOM 1.0 does not define.", fixExtra),
	schemaRule("envelope.const",
		"som_version is not \"1.0\".",
		"Send som_version \"1.0\" (a string): the bus accepts SOM 1.0 only."),
	schemaRule("envelope.enum",
		"message_type is not story.context, story.event or asset.reference.",
		"Send one of the three SOM 1.0 message types."),
	schemaRule("envelope.format.date-time",
		"timestamp is not an RFC 3339 date-time.",
		"Send a full date-time with a time zone, such as 2024-05-01T12:00:00Z."),
	schemaRule("envelope.format.uuid",
		"message_id or correlation_id is not a UUID.",
		"Send a UUID in its 8-4-4-4-12 hex form; generate a new one for every new message."),
	schemaRule("envelope.pattern",
		"system_id is not 2 to 63 lower-case letters, digits and hyphens starting with a letter or digit.",
		"Send your system's id as granted, such as cms-main."),
	schemaRule("envelope.required",
		"The envelope lacks a required member (som_version, message_id, message_type, system_id, timestamp or payload).", fixRequired),
	schemaRule("envelope.type",
		"An envelope member, or the message itself, has the wrong JSON type (the payload must be an object).", fixPath),

	// story-context
	schemaRule("story-context.additionalProperties",
		"A story.context payload, or one of its assets, has a member SOM 1.0 does not define.", fixExtra),
	schemaRule("story-context.enum",
		"A story.context state or asset kind is not one of the allowed values.",
		"Use a state of draft, ready, published, updated, unpublished or killed, and an asset kind of image, video, audio, graphic or document."),
	schemaRule("story-context.format.date-time",
		"embargo_until is not an RFC 3339 date-time.",
		"Send a full date-time with a time zone, such as 2024-05-01T12:00:00Z."),
	schemaRule("story-context.format.uri",
		"body_ref or an asset's ref is not an absolute URI.",
		"Send an absolute URI with a scheme, such as https://cms.example/stories/123/body."),
	schemaRule("story-context.maxItems",
		"A story.context list is too long: at most 200 assets, 100 authors, 100 labels.",
		"Send fewer items; content travels by reference, not inline."),
	schemaRule("story-context.maxLength",
		"A story.context string is too long (headline and kill_reason 1000, caption 2000, slug and desk 256, URIs 2048, language 64, author 256, label 128 characters).",
		"Shorten the member at path; move long content out and send it by reference."),
	schemaRule("story-context.maximum",
		"sequence_number is over 9007199254740991 (2^53 - 1), the largest integer every consumer can hold exactly.",
		"Number snapshots from 1, one up per snapshot."),
	schemaRule("story-context.minLength",
		"An author or label is an empty string.",
		"Leave empty entries out of authors and labels."),
	schemaRule("story-context.minimum",
		"sequence_number is less than 1.",
		"Number a story's snapshots from 1."),
	schemaRule("story-context.pattern",
		"story_id is not 1 to 128 of A-Z a-z 0-9 . _ : -, or language is not a BCP 47 tag.",
		"Send the story's stable id in that alphabet, and a language tag such as en or en-GB."),
	schemaRule("story-context.required",
		"A story.context payload lacks story_id, sequence_number, state or headline, or an asset lacks ref or kind.",
		"A bug in your product: every snapshot is complete. Add the member named in the message to the object at path."),
	schemaRule("story-context.type",
		"A story.context member has the wrong JSON type (for example sequence_number must be an integer).", fixPath),

	// story-event
	schemaRule("story-event.additionalProperties",
		"A story.event payload has a member SOM 1.0 does not define (put free-form data in details).", fixExtra),
	schemaRule("story-event.enum",
		"event is not one of published, updated, corrected, killed, embargo_lifted.",
		"Send one of the SOM 1.0 story events."),
	schemaRule("story-event.format.date-time",
		"occurred_at is not an RFC 3339 date-time.",
		"Send a full date-time with a time zone, such as 2024-05-01T12:00:00Z."),
	schemaRule("story-event.maxProperties",
		"details has more than 64 members.",
		"Send fewer details; content travels by reference, not inline."),
	schemaRule("story-event.pattern",
		"story_id is not 1 to 128 of A-Z a-z 0-9 . _ : -.",
		"Send the story's stable id in that alphabet."),
	schemaRule("story-event.required",
		"A story.event payload lacks story_id, event or occurred_at.", fixRequired),
	schemaRule("story-event.type",
		"A story.event member has the wrong JSON type (details must be an object).", fixPath),

	// asset-reference
	schemaRule("asset-reference.additionalProperties",
		"An asset.reference payload, or its rights, has a member SOM 1.0 does not define.", fixExtra),
	schemaRule("asset-reference.enum",
		"kind is not one of image, video, audio, graphic, document.",
		"Send one of the SOM 1.0 asset kinds."),
	schemaRule("asset-reference.format.date-time",
		"rights.expires_at is not an RFC 3339 date-time.",
		"Send a full date-time with a time zone, such as 2024-05-01T12:00:00Z."),
	schemaRule("asset-reference.format.uri",
		"ref is not an absolute URI.",
		"Send an absolute URI with a scheme, such as https://media.example/assets/42."),
	schemaRule("asset-reference.maxItems",
		"story_ids has more than 100 items.",
		"Send fewer story ids."),
	schemaRule("asset-reference.maxLength",
		"An asset.reference string is too long (ref 2048, rights.usage 1000 characters).",
		"Shorten the member at path."),
	schemaRule("asset-reference.pattern",
		"asset_id or a story_ids item is not 1 to 128 of A-Z a-z 0-9 . _ : -.",
		"Send stable ids in that alphabet."),
	schemaRule("asset-reference.required",
		"An asset.reference payload lacks asset_id, ref or kind.", fixRequired),
	schemaRule("asset-reference.type",
		"An asset.reference member has the wrong JSON type (story_ids must be an array, rights an object).", fixPath),
}

// conformanceRules are the SOM 1.0 rules JSON Schema cannot say well. None
// reads the clock: the same message always gets the same answer.
var conformanceRules = []Rule{
	{ID: ConformanceKillReason, Status: http.StatusBadRequest, Source: SourceConformance, Stage: 8, Retry: retryNo,
		Meaning: "A story.context with state killed has no kill_reason, or a blank one.",
		Fix:     "Say why the story was killed in kill_reason."},
	{ID: ConformancePublishedHeadline, Status: http.StatusBadRequest, Source: SourceConformance, Stage: 8, Retry: retryNo,
		Meaning: "A story.context with state published or updated has a blank headline.",
		Fix:     "Send the story's headline; a blank one is only allowed before publication."},
	{ID: ConformanceEmbargoPast, Source: SourceConformance, Stage: 8, Warning: true, Retry: "-",
		Meaning: "Warning: embargo_until is earlier than the message's own timestamp, so the embargo had already lifted.",
		Fix:     "Nothing needed: the message was accepted. Drop embargo_until once an embargo has lifted."},
	{ID: ConformanceKillReasonUnused, Source: SourceConformance, Stage: 8, Warning: true, Retry: "-",
		Meaning: "Warning: a story.context has a kill_reason but its state is not killed; consumers ignore it.",
		Fix:     "Nothing needed: the message was accepted. Send kill_reason only with state killed."},
	{ID: ConformanceRightsExpired, Source: SourceConformance, Stage: 8, Warning: true, Retry: "-",
		Meaning: "Warning: an asset.reference's rights.expires_at is earlier than the message's own timestamp, so its usage rights had already ended.",
		Fix:     "Nothing needed: the message was accepted. Check the asset's rights before using it."},
}
