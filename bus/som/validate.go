package som

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/storybus/storybus/rules"
)

// payloadPath is the JSON Pointer of the payload; family schema violations
// are reported under it.
const payloadPath = "/payload"

// Validate checks a parsed message against SOM 1.0 (stage 8) and returns every
// refusal and every warning, each sorted by path, then rule, then message.
//
// The envelope schema is checked first. When message_type names a family and
// the payload is an object, the payload is checked against the family's
// schema too, whatever else is wrong with the envelope; its violations are
// named after the family and their paths start with /payload. Schema rule
// ids are <schema>.<keyword>, or <schema>.format.<format> for formats.
// A missing member is one <schema>.required violation per member, at the
// path of the object that lacks it; a member the schema does not allow is one
// <schema>.additionalProperties violation per member, at the member's own
// path.
//
// Conformance rules run alongside the schemas, each only when every member it
// reads is present where it needs it and free of schema violations, so a
// producer sees all it has to fix in one answer without a conformance rule
// repeating what a schema already said. Conformance never reads the clock:
// the same message always gets the same answer. Warnings are returned even
// when there are refusals; the caller decides what to do with them.
//
// m should come from Parse; Validate does not modify it.
func Validate(m *Message) (refusals, warnings []rules.Violation) {
	var doc map[string]any
	if m != nil {
		doc = m.Doc
	}
	refusals = schemaViolations(refusals, SchemaEnvelope, "", validateSchema(SchemaEnvelope, doc))

	msgType, _ := doc["message_type"].(string)
	family, known := FamilyOf(msgType)
	payload, isObject := doc["payload"].(map[string]any)
	if known && isObject {
		refusals = schemaViolations(refusals, family, payloadPath, validateSchema(family, payload))
		c := conformance{doc: doc, payload: payload, schema: refusals}
		c.check(family)
		refusals = append(refusals, c.refusals...)
		warnings = c.warnings
	}
	return sortViolations(refusals), sortViolations(warnings)
}

// schemaViolations appends the leaf errors of a validation error tree.
func schemaViolations(dst []rules.Violation, schema, prefix string, err error) []rules.Violation {
	if err == nil {
		return dst
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		// The validator returns nothing else; should it ever, the error is
		// reported rather than dropped, so the message is not accepted.
		return append(dst, rules.Violation{Source: rules.SourceSchema, Rule: schema + ".invalid", Message: err.Error(), Path: prefix})
	}
	return walk(dst, schema, prefix, verr)
}

// walk reports the leaves of the tree, skipping the kinds that only group
// other errors.
func walk(dst []rules.Violation, schema, prefix string, e *jsonschema.ValidationError) []rules.Violation {
	switch e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.Reference, *kind.AllOf:
		for _, cause := range e.Causes {
			dst = walk(dst, schema, prefix, cause)
		}
		return dst
	}
	at := prefix + pointer(e.InstanceLocation)
	v := func(rule, path, msg string) rules.Violation {
		return rules.Violation{Source: rules.SourceSchema, Rule: schema + "." + rule, Message: msg, Path: path}
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, name := range k.Missing {
			dst = append(dst, v("required", at, "must have required property "+quote(name)))
		}
	case *kind.AdditionalProperties:
		for _, name := range k.Properties {
			dst = append(dst, v("additionalProperties", at+"/"+escapePointer(name), "must not have additional property "+quote(abbreviate(name))))
		}
	case *kind.Format:
		dst = append(dst, v("format."+k.Want, at, "must be a valid "+k.Want))
	default:
		dst = append(dst, v(keyword(e.ErrorKind), at, describe(e.ErrorKind)))
	}
	return dst
}

// keyword is the schema keyword an error kind stands for. Only kinds the
// SOM schemas cannot produce (a false subschema, or a value of a Go type JSON
// does not have, which Parse never makes) lack one; they get "invalid", which
// the catalogue lacks, so the HTTP layer answers 503 rather than guess.
func keyword(k jsonschema.ErrorKind) string {
	if kp := k.KeywordPath(); len(kp) > 0 {
		return kp[0]
	}
	return "invalid"
}

// describe says, for people, what the value must be.
func describe(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, t := range k.Want {
			want[i] = article(t)
		}
		return "must be " + strings.Join(want, " or ")
	case *kind.Const:
		return "must be " + display(k.Want)
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		return "must be one of " + strings.Join(want, ", ")
	case *kind.Pattern:
		return "must match pattern " + quote(k.Want)
	case *kind.MinLength:
		return "must be at least " + count(k.Want, "character") + " long"
	case *kind.MaxLength:
		return "must be at most " + count(k.Want, "character") + " long"
	case *kind.Minimum:
		return "must be >= " + k.Want.RatString()
	case *kind.Maximum:
		return "must be <= " + k.Want.RatString()
	case *kind.ExclusiveMinimum:
		return "must be > " + k.Want.RatString()
	case *kind.ExclusiveMaximum:
		return "must be < " + k.Want.RatString()
	case *kind.MultipleOf:
		return "must be a multiple of " + k.Want.RatString()
	case *kind.MinItems:
		return "must have at least " + count(k.Want, "item")
	case *kind.MaxItems:
		return "must have at most " + count(k.Want, "item")
	case *kind.UniqueItems:
		return fmt.Sprintf("must not have duplicate items (items %d and %d are equal)", k.Duplicates[0], k.Duplicates[1])
	case *kind.MinProperties:
		return "must have at least " + count(k.Want, "property")
	case *kind.MaxProperties:
		return "must have at most " + count(k.Want, "property")
	}
	return "must satisfy '" + keyword(k) + "'"
}

func article(jsonType string) string {
	switch jsonType {
	case "object", "array", "integer":
		return "an " + jsonType
	case "null":
		return "null"
	}
	return "a " + jsonType
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return strconv.Itoa(n) + " " + strings.TrimSuffix(noun, "y") + "ies"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// display renders a schema value: strings in single quotes, others as JSON.
func display(v any) string {
	if s, ok := v.(string); ok {
		return quote(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func quote(s string) string { return "'" + s + "'" }

// pointer renders an instance location as an RFC 6901 JSON Pointer.
func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return ""
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

// sortViolations orders violations by path, rule and message, and drops
// exact duplicates.
func sortViolations(vs []rules.Violation) []rules.Violation {
	slices.SortFunc(vs, func(a, b rules.Violation) int {
		return cmp.Or(
			strings.Compare(a.Path, b.Path),
			strings.Compare(a.Rule, b.Rule),
			strings.Compare(a.Message, b.Message),
			strings.Compare(string(a.Source), string(b.Source)),
		)
	})
	return slices.Compact(vs)
}
