package bus_test

import (
	"bytes"
	"net/http"
	"testing"
)

// FuzzPublish sends arbitrary bodies through every stage of the publish
// handler on a real embedded JetStream: no answer may be a 500, a panic,
// a hang or outside the documented shapes and catalogue.
func FuzzPublish(f *testing.F) {
	h := newHarness(f)
	tok := h.token(f, "newsroom", "cms", cmsSecret)
	for _, seed := range []string{
		string(snapshot("6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20", "fuzz-story", 1, "cms")),
		`{"som_version":"1.0","message_id":"not-a-uuid","message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{}}`,
		`{"som_version":"1.0","message_id":"6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a21","message_type":"story.event","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"x","event":"killed","occurred_at":"2026-11-29T09:00:00Z"}}`,
		`{"som_version":"1.0","message_id":"6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a22","message_type":"asset.reference","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"asset_id":"a1","ref":"https://media.example/a1.jpg","kind":"image"}}`,
		`{"payload":{"assets":[{"ref":"::","kind":"x"}]},"extra":true}`,
		`[]`, `{}`, `null`, `{"a":1e400}`, `{"a":"\ud800"}`, "\xff", `{"a":{"a":{"a":[[[[]]]]}}}`,
	} {
		f.Add([]byte(seed), "application/json")
	}
	f.Add([]byte(`{}`), "text/plain")
	f.Add([]byte(`{}`), "application/vnd.som+json; charset=utf-8")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		req, err := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(body))
		if err != nil {
			t.Skip()
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		if contentType != "" && printableASCII(contentType) {
			req.Header["Content-Type"] = []string{contentType}
		}
		a := h.do(t, req) // checks the shape and the catalogue
		if a.Status == http.StatusServiceUnavailable {
			t.Fatalf("store failure on fuzz input: %s", a.Raw)
		}
	})
}

// printableASCII reports whether s can be sent as a header value.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
