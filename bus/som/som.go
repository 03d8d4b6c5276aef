// Package som parses and validates SOM 1.0 messages, the JSON messages that
// producers publish to the bus (SPEC §4).
//
// The data path calls it in two steps. Parse is stage 7: it turns the body
// into a Message or refuses it with a *ParseError, which the HTTP layer
// answers as message.not_json. Validate is stage 8: it checks the envelope
// schema, the payload against its family's schema, and the conformance rules,
// and reports every violation at once. ContentHash gives the idempotency
// record its SHA-256 of the message's RFC 8785 canonical form.
//
// The four JSON Schema files (draft 2020-12) are embedded in the binary and
// published unchanged in docs/som/.
package som

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Message types of SOM 1.0.
const (
	TypeStoryContext   = "story.context"
	TypeStoryEvent     = "story.event"
	TypeAssetReference = "asset.reference"
)

// Families of SOM 1.0, which are also the names of their payload schemas.
const (
	FamilyStoryContext   = "story-context"
	FamilyStoryEvent     = "story-event"
	FamilyAssetReference = "asset-reference"
)

// SchemaEnvelope is the name of the envelope schema, the prefix of its rule ids.
const SchemaEnvelope = "envelope"

// schemaBase is the $id prefix of every SOM 1.0 schema.
const schemaBase = "https://schemas.storybus.io/som/1.0/"

// schemaNames are the embedded schemas, in the order they are compiled.
var schemaNames = []string{SchemaEnvelope, FamilyStoryContext, FamilyStoryEvent, FamilyAssetReference}

//go:embed schemas/*.json
var schemaFS embed.FS

// Message is one parsed SOM message.
//
// Raw and Doc are exactly what the producer sent. The typed fields are a
// best-effort reading of Doc made by Parse: each is set when the member exists
// with the expected JSON type and left zero otherwise. They are only
// trustworthy once Validate has returned no refusals.
type Message struct {
	// Raw is the body as received. Parse keeps the caller's slice: do not
	// modify it afterwards.
	Raw []byte
	// Doc is the decoded top-level object; numbers are json.Number. Its
	// strings share Raw's memory, which stays in memory while any of them
	// is kept; the typed fields below are copies of their own.
	Doc map[string]any

	// MessageID is the envelope's message_id.
	MessageID string
	// MessageType is the envelope's message_type.
	MessageType string
	// SystemID is the envelope's system_id.
	SystemID string
	// Family is the family that MessageType names, empty for an unknown type.
	Family string
	// StoryID is the payload's story_id for story.context and story.event,
	// empty otherwise.
	StoryID string
	// State is the payload's state, for story.context only.
	State string
	// SequenceNumber is the payload's sequence_number, for story.context
	// only; zero when absent or not an integer that fits an int64.
	SequenceNumber int64
}

// FamilyOf returns the family of a message type: story.context →
// story-context, story.event → story-event, asset.reference →
// asset-reference. ok is false for any other type.
func FamilyOf(messageType string) (family string, ok bool) {
	switch messageType {
	case TypeStoryContext:
		return FamilyStoryContext, true
	case TypeStoryEvent:
		return FamilyStoryEvent, true
	case TypeAssetReference:
		return FamilyAssetReference, true
	}
	return "", false
}

// Schemas returns the embedded schema files by schema name ("envelope",
// "story-context", "story-event", "asset-reference"). The map and its slices
// are fresh copies on every call.
func Schemas() map[string][]byte {
	out := make(map[string][]byte, len(schemaNames))
	for _, name := range schemaNames {
		out[name] = bytes.Clone(mustSchemaFile(name))
	}
	return out
}

func mustSchemaFile(name string) []byte {
	b, err := fs.ReadFile(schemaFS, path.Join("schemas", name+".json"))
	if err != nil {
		panic(fmt.Sprintf("som: embedded schema %s: %v", name, err))
	}
	return b
}

// compiled holds the schemas, compiled once on first use. The schemas are
// part of the binary, so a schema that does not compile is a programming
// error that every test run catches: it panics rather than returning an
// error on every message.
var compiled = sync.OnceValue(func() map[string]*jsonschema.Schema {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	for _, name := range schemaNames {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(mustSchemaFile(name)))
		if err != nil {
			panic(fmt.Sprintf("som: embedded schema %s: %v", name, err))
		}
		if err := c.AddResource(schemaBase+name+".json", doc); err != nil {
			panic(fmt.Sprintf("som: embedded schema %s: %v", name, err))
		}
	}
	out := make(map[string]*jsonschema.Schema, len(schemaNames))
	for _, name := range schemaNames {
		s, err := c.Compile(schemaBase + name + ".json")
		if err != nil {
			panic(fmt.Sprintf("som: compile schema %s: %v", name, strings.TrimSpace(err.Error())))
		}
		out[name] = s
	}
	return out
})
