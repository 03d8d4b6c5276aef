package openapitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCheck: answers in the description pass; each kind of drift is
// caught.
func TestCheck(t *testing.T) {
	const (
		accepted  = `{"accepted":true,"message_id":"6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20","message_type":"story.context","family":"story-context","tolerated":[]}`
		rateLimit = `{"accepted":false,"violations":[{"source":"policy","rule":"rate.limited","message":"slow down"}]}`
		schema    = `{"accepted":false,"violations":[{"source":"schema","rule":"envelope.required","message":"missing","path":"/payload"}]}`
	)
	jsonHeader := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"cms-7f3a-42"}}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	publish := "/v1/tenants/newsroom/messages"
	pull := "/v1/tenants/newsroom/consumers/web/messages"
	const (
		storyContext = `{"som_version":"1.0","message_id":"6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20","message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"story-0001","sequence_number":1,"state":"draft","headline":"Council approves new harbour bridge"}}`
		storyEvent   = `{"som_version":"1.0","message_id":"6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a21","message_type":"story.event","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"story-0001","event":"published","occurred_at":"2026-11-29T09:00:00Z","details":{"channel":"web","pages":[1,2]}}}`
	)
	// delivery is a pull answer delivering msg as a message of type mt.
	delivery := func(mt, msg string) string {
		var head struct {
			MessageID string `json:"message_id"`
		}
		_ = json.Unmarshal([]byte(msg), &head)
		return fmt.Sprintf(`{"messages":[{"message_id":%q,"message_type":%q,"family":%q,"ack_id":"a1","delivery":1,"message":%s}]}`,
			head.MessageID, mt, strings.ReplaceAll(mt, ".", "-"), msg)
	}
	for _, tc := range []struct {
		name, method, path string
		port               Port
		status             int
		header             http.Header
		body               string
		ok                 bool
	}{
		{"accepted", http.MethodPost, publish, PublishPort, 202, jsonHeader(), accepted, true},
		{"accepted without tolerated", http.MethodPost, publish, PublishPort, 202, jsonHeader(),
			`{"accepted":true,"message_id":"6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20","message_type":"story.context","family":"story-context"}`, false},
		{"a member too many", http.MethodPost, publish, PublishPort, 200, jsonHeader(),
			`{"accepted":true,"duplicate":true,"message_id":"6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20","extra":1}`, false},
		{"429 with Retry-After", http.MethodPost, publish, PublishPort, 429, jsonHeader("Retry-After", "2"), rateLimit, true},
		{"429 without Retry-After", http.MethodPost, publish, PublishPort, 429, jsonHeader(), rateLimit, false},
		{"a status not described", http.MethodPost, publish, PublishPort, 418, jsonHeader(), rateLimit, false},
		{"a rule the status does not list", http.MethodPost, publish, PublishPort, 401, jsonHeader(),
			`{"accepted":false,"violations":[{"source":"policy","rule":"grant.system_id","message":"no"}]}`, false},
		{"a source the status lists", http.MethodPost, publish, PublishPort, 400, jsonHeader(), schema, true},
		{"a source on a route that does not list it", http.MethodGet, "/v1/tenants/newsroom/consumers/web/messages", PublishPort, 400, jsonHeader(), schema, false},
		{"a workspace rule", http.MethodPost, publish, PublishPort, 409, jsonHeader(),
			`{"accepted":false,"violations":[{"source":"policy","rule":"tenant.embargo","message":"no"}]}`, true},
		{"an unknown path", http.MethodGet, "/v1/nothing", PublishPort, 403, jsonHeader(), `{"message":"Missing Authentication Token"}`, true},
		{"an unknown path without a request id", http.MethodGet, "/v1/nothing", PublishPort, 403, http.Header{"Content-Type": {"application/json"}}, `{"message":"Missing Authentication Token"}`, false},
		{"an answer without a request id", http.MethodPost, publish, PublishPort, 202, http.Header{"Content-Type": {"application/json"}}, accepted, false},
		{"a request id with a comma", http.MethodPost, publish, PublishPort, 202, jsonHeader("X-Request-Id", "a,b"), accepted, false},
		{"503 without request_id", http.MethodPost, publish, PublishPort, 503, jsonHeader("Retry-After", "1"),
			`{"accepted":false,"violations":[{"source":"policy","rule":"bus.unavailable","message":"internal error"}]}`, false},
		{"503 with request_id", http.MethodPost, publish, PublishPort, 503, jsonHeader("Retry-After", "1"),
			`{"accepted":false,"violations":[{"source":"policy","rule":"bus.unavailable","message":"internal error"}],"request_id":"cms-7f3a-42"}`, true},
		{"400 with request_id", http.MethodPost, publish, PublishPort, 400, jsonHeader(),
			`{"accepted":false,"violations":[{"source":"policy","rule":"message.not_json","message":"no"}],"request_id":"cms-7f3a-42"}`, false},
		{"an unknown method", http.MethodGet, publish, PublishPort, 403, jsonHeader(), `{"message":"Missing Authentication Token"}`, true},
		{"an unknown path answered 404", http.MethodGet, "/v1/nothing", PublishPort, 404, jsonHeader(), `{"message":"Not Found"}`, false},
		{"an operations path on the publish port", http.MethodGet, "/healthz", PublishPort, 200, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "ok\n", false},
		{"healthz", http.MethodGet, "/healthz", OperationsPort, 200, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "ok\n", true},
		{"readyz not ready", http.MethodGet, "/readyz", OperationsPort, 503, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "not ready: store\n", true},
		{"readyz answering JSON", http.MethodGet, "/readyz", OperationsPort, 200, jsonHeader(), `{"ok":true}`, false},
		{"an unknown operations path", http.MethodGet, "/debug", OperationsPort, 404, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "404 page not found\n", true},
		// A delivered message is checked as the family its message_type
		// names (SOMMessage's discriminator).
		{"a delivered story.context", http.MethodGet, pull, PublishPort, 200, jsonHeader(), delivery("story.context", storyContext), true},
		{"a delivered story.context with a story.event's payload", http.MethodGet, pull, PublishPort, 200, jsonHeader(),
			delivery("story.context", strings.Replace(storyEvent, `"story.event"`, `"story.context"`, 1)), false},
		{"a delivered story.context with a member SOM does not define", http.MethodGet, pull, PublishPort, 200, jsonHeader(),
			delivery("story.context", strings.Replace(storyContext, `"state":"draft"`, `"state":"draft","subtitle":"x"`, 1)), false},
		{"a delivered story.context in a state SOM does not define", http.MethodGet, pull, PublishPort, 200, jsonHeader(),
			delivery("story.context", strings.Replace(storyContext, `"state":"draft"`, `"state":"archived"`, 1)), false},
		{"a delivered story.event with free-form details", http.MethodGet, pull, PublishPort, 200, jsonHeader(), delivery("story.event", storyEvent), true},
		{"a delivered message of no family", http.MethodGet, pull, PublishPort, 200, jsonHeader(),
			delivery("story.event", strings.Replace(storyEvent, `"story.event"`, `"story.rumour"`, 1)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NewChecker(tc.port).Check(httptest.NewRequest(tc.method, tc.path, nil), tc.status, tc.header, []byte(tc.body))
			if (err == nil) != tc.ok {
				t.Fatalf("error %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestHandlerHoldsTheAnswerUntilChecked: the wrapped handler's answer
// reaches the client unchanged, and a mismatch is recorded by then.
func TestHandlerHoldsTheAnswerUntilChecked(t *testing.T) {
	c := NewChecker(PublishPort)
	h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(`{"accepted":false}`))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/tenants/newsroom/messages", nil))
	if rec.Code != http.StatusTeapot || rec.Body.String() != `{"accepted":false}` || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("answer changed: %d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
	if errs := c.Take(); len(errs) != 1 {
		t.Fatalf("recorded %v, want the one mismatch", errs)
	}
	if errs := c.Take(); len(errs) != 0 {
		t.Fatalf("Take kept %v", errs)
	}
}
