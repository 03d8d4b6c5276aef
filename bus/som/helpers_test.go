package som_test

import (
	"encoding/json"
	"testing"

	"github.com/storybus/storybus/bus/som"
)

// storyContext returns a valid story.context message.
func storyContext() map[string]any {
	return map[string]any{
		"som_version":  "1.0",
		"message_id":   "0b7f3c1e-8d2a-4c5e-9f1a-2b3c4d5e6f70",
		"message_type": "story.context",
		"system_id":    "cms-main",
		"timestamp":    "2024-05-01T12:00:00Z",
		"payload": map[string]any{
			"story_id":        "story-123",
			"sequence_number": 1,
			"state":           "draft",
			"headline":        "Council approves budget",
		},
	}
}

// storyEvent returns a valid story.event message.
func storyEvent() map[string]any {
	return map[string]any{
		"som_version":  "1.0",
		"message_id":   "6a1d2b3c-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
		"message_type": "story.event",
		"system_id":    "cms-main",
		"timestamp":    "2024-05-01T12:00:00Z",
		"payload": map[string]any{
			"story_id":    "story-123",
			"event":       "published",
			"occurred_at": "2024-05-01T11:59:58Z",
		},
	}
}

// assetReference returns a valid asset.reference message.
func assetReference() map[string]any {
	return map[string]any{
		"som_version":  "1.0",
		"message_id":   "f47ac10b-58cc-4372-a567-0e02b2c3d479",
		"message_type": "asset.reference",
		"system_id":    "media-manager",
		"timestamp":    "2024-05-01T12:00:00Z",
		"payload": map[string]any{
			"asset_id":  "img-42",
			"ref":       "https://media.example/assets/42",
			"kind":      "image",
			"story_ids": []any{"story-123"},
			"rights":    map[string]any{"usage": "editorial", "expires_at": "2025-05-01T00:00:00Z"},
		},
	}
}

// typicalStory is a story.context of about 2 KB, for benchmarks and fuzz
// seeds.
func typicalStory() []byte {
	doc := storyContext()
	p := doc["payload"].(map[string]any)
	p["sequence_number"] = 7
	p["state"] = "published"
	p["headline"] = "Council approves the city budget after a late-night session on housing and transport"
	p["slug"] = "council-budget-approved"
	p["desk"] = "city"
	p["language"] = "en-GB"
	p["embargo_until"] = "2024-05-01T14:00:00Z"
	p["body_ref"] = "https://cms.example/stories/story-123/revisions/7/body"
	var assets []any
	for i, k := range []string{"image", "image", "video", "graphic", "document", "audio"} {
		assets = append(assets, map[string]any{
			"ref":     "https://media.example/assets/" + string(rune('a'+i)) + "-0000-1111-2222",
			"kind":    k,
			"caption": "Councillors vote on the budget in the chamber on Tuesday evening, photographed from the public gallery",
		})
	}
	p["assets"] = assets
	p["authors"] = []any{"Ada Reporter", "Ben Editor", "Cleo Photographer"}
	p["labels"] = []any{"politics", "local", "budget", "housing", "transport", "council", "city-hall"}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

func encode(t testing.TB, doc map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parse(t testing.TB, body []byte) *som.Message {
	t.Helper()
	m, err := som.Parse(body)
	if err != nil {
		t.Fatalf("Parse(%.200s): %v", body, err)
	}
	return m
}

func payload(doc map[string]any) map[string]any { return doc["payload"].(map[string]any) }
