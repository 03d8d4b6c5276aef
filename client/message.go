package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Message is one SOM message, serialised once. Every send, retry and
// resend of it uses exactly these bytes, so that the bus recognises a
// retry: a message rebuilt for a retry, with a new timestamp, would be a
// different message under a reused message_id.
type Message struct {
	raw     []byte
	id      string
	typ     string
	storyID string
	assetID string
}

// NewMessage wraps a serialised SOM message. It keeps a copy of raw and
// reads the members the client needs (message_id, message_type, the story
// or asset id); it does not validate the message, the bus does.
func NewMessage(raw []byte) (*Message, error) {
	var head struct {
		MessageID   string `json:"message_id"`
		MessageType string `json:"message_type"`
		Payload     struct {
			StoryID string `json:"story_id"`
			AssetID string `json:"asset_id"`
		} `json:"payload"`
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("client: a SOM message is a JSON object")
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		// Members of unexpected types are the bus's to refuse; only
		// unreadable JSON is refused here.
		var obj map[string]json.RawMessage
		if jerr := json.Unmarshal(raw, &obj); jerr != nil {
			return nil, fmt.Errorf("client: a SOM message is a JSON object: %w", jerr)
		}
	}
	return &Message{
		raw:     bytes.Clone(raw),
		id:      head.MessageID,
		typ:     head.MessageType,
		storyID: head.Payload.StoryID,
		assetID: head.Payload.AssetID,
	}, nil
}

// ID returns the message_id.
func (m *Message) ID() string { return m.id }

// Type returns the message_type.
func (m *Message) Type() string { return m.typ }

// Bytes returns a copy of the serialised message.
func (m *Message) Bytes() []byte { return bytes.Clone(m.raw) }

// Snapshot reports whether the message is a story.context snapshot.
func (m *Message) Snapshot() bool { return m.typ == "story.context" }

// Key returns what orders the message among others: its story, for the
// families that carry a story_id, else its asset, else the message alone.
func (m *Message) Key() string {
	switch {
	case m.storyID != "":
		return "story:" + m.storyID
	case m.assetID != "":
		return "asset:" + m.assetID
	}
	return "message:" + m.id
}

// Envelope is what Build needs to make a message.
type Envelope struct {
	// MessageID defaults to a new random UUID. Give a new one to every new
	// message, and never a new one to a retry.
	MessageID string
	// MessageType is story.context, story.event or asset.reference.
	MessageType string
	// SystemID is the producing system.
	SystemID string
	// Timestamp defaults to now. It is part of the content.
	Timestamp time.Time
	// CorrelationID is optional.
	CorrelationID string
	// Payload is the family's payload; it is marshalled with encoding/json.
	Payload any
}

// Build serialises a new SOM 1.0 message once. Keep the returned Message
// until its final answer and resend only it.
func Build(e Envelope) (*Message, error) {
	if e.MessageID == "" {
		e.MessageID = uuid.NewString()
	}
	if e.Timestamp.IsZero() {
		e.Timestamp = time.Now()
	}
	doc := struct {
		SOMVersion    string `json:"som_version"`
		MessageID     string `json:"message_id"`
		MessageType   string `json:"message_type"`
		SystemID      string `json:"system_id"`
		Timestamp     string `json:"timestamp"`
		CorrelationID string `json:"correlation_id,omitempty"`
		Payload       any    `json:"payload"`
	}{"1.0", e.MessageID, e.MessageType, e.SystemID, e.Timestamp.UTC().Format(time.RFC3339Nano), e.CorrelationID, e.Payload}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("client: building the message: %w", err)
	}
	return NewMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}
