package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/internal/storetest"
)

// BenchmarkPublishPolicy publishes through every stage of the handler with
// the workspace policy on and off, in one run, on a real embedded
// JetStream: the difference is what the policy costs a publish.
func BenchmarkPublishPolicy(b *testing.B) {
	for _, tc := range []struct {
		name string
		off  bool
	}{{"on", false}, {"off", true}} {
		b.Run(tc.name, func(b *testing.B) {
			_, st := storetest.Embedded(b)
			srv := bus.New(bus.Options{Store: st, WithoutPolicy: tc.off})
			if err := srv.Apply(context.Background(), workspaceConfig("newsroom")); err != nil {
				b.Fatal(err)
			}
			h := &harness{srv: srv, http: httptest.NewServer(srv.Handler())}
			defer h.http.Close()
			tok := h.token(b, "newsroom", "cms", cmsSecret)
			var story atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				id := story.Add(1)
				for seq := 1; pb.Next(); seq++ {
					body := snapshot(uuid.NewString(), fmt.Sprintf("bench-%d", id), seq, "cms")
					req := httptest.NewRequest(http.MethodPost, "/v1/tenants/newsroom/messages", bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+tok)
					req.Header.Set("Content-Type", "application/json")
					rec := httptest.NewRecorder()
					srv.Handler().ServeHTTP(rec, req)
					if rec.Code != http.StatusAccepted {
						b.Fatalf("answer %d: %s", rec.Code, rec.Body)
					}
				}
			})
		})
	}
}

// BenchmarkAcceptedPublish is one accepted snapshot through the whole HTTP
// handler, policy on, on a real embedded JetStream in the same process: its
// allocations per operation are everything one accepted publish allocates,
// the store's server and client included, besides a handful in the loop
// itself (the message_id, the request).
func BenchmarkAcceptedPublish(b *testing.B) {
	publishOne := acceptedPublisher(b)
	b.ReportAllocs()
	for b.Loop() {
		publishOne()
	}
}

// maxAllocsPerAccepted is the ceiling on allocations per accepted publish
// through the whole handler, the store included (about 250 measured).
const maxAllocsPerAccepted = 300

// TestAcceptedPublishAllocations holds the allocations of an accepted
// publish under their ceiling: an average over many publishes, counted by
// the runtime, not timed.
func TestAcceptedPublishAllocations(t *testing.T) {
	publishOne := acceptedPublisher(t)
	n := testing.AllocsPerRun(300, publishOne)
	t.Logf("%.0f allocations per accepted publish", n)
	if n > maxAllocsPerAccepted {
		t.Fatalf("%.0f allocations per accepted publish, over the ceiling of %d", n, maxAllocsPerAccepted)
	}
}

// acceptedPublisher returns a function that sends the next snapshot of one
// story through the bus's handler and fails unless it is accepted.
func acceptedPublisher(t testing.TB) func() {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	handler := h.srv.Handler()
	header := http.Header{}
	header.Set("Authorization", "Bearer "+tok)
	header.Set("Content-Type", "application/json")
	target, _ := url.Parse("/v1/tenants/newsroom/messages")
	var w discardWriter
	var body []byte
	seq := 0
	return func() {
		seq++
		body = typicalSnapshot(body[:0], uuid.NewString(), "story-bench", seq)
		req := &http.Request{
			Method: http.MethodPost, URL: target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: header, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
			RemoteAddr: "192.0.2.1:1234", RequestURI: target.Path,
		}
		w.reset()
		handler.ServeHTTP(&w, req)
		if w.status != http.StatusAccepted {
			t.Fatalf("answer %d", w.status)
		}
	}
}

// discardWriter is an http.ResponseWriter that keeps the status alone.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) reset() {
	if w.header == nil {
		w.header = http.Header{}
	}
	clear(w.header)
	w.status = 0
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

// typicalSnapshot appends a typical story.context of about 1.3 KB (the
// shape storybus bench sends): a headline, slug, desk, language, body
// reference, three assets, authors and labels, valid with no warnings.
func typicalSnapshot(b []byte, id, story string, seq int) []byte {
	state := "updated"
	if seq == 1 {
		state = "draft"
	}
	b = append(b, `{"som_version":"1.0","message_id":"`...)
	b = append(b, id...)
	b = append(b, `","message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"`...)
	b = append(b, story...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"state":"`...)
	b = append(b, state...)
	b = append(b, `","headline":"Council approves new harbour bridge after late-night vote on the transport budget","slug":"council-harbour-bridge",`+
		`"desk":"local","language":"en-GB","body_ref":"https://cms.example/stories/`...)
	b = append(b, story...)
	b = append(b, `/body","assets":[`...)
	for i, kind := range []string{"image", "image", "video"} {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"ref":"https://media.example/assets/`...)
		b = append(b, story...)
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(i+1), 10)
		b = append(b, `","kind":"`...)
		b = append(b, kind...)
		b = append(b, `","caption":"Councillors vote on the harbour bridge in the chamber on Tuesday evening, seen from the public gallery"}`...)
	}
	return append(b, `],"authors":["Ada Reporter","Ben Editor","Cleo Photographer"],"labels":["politics","local","transport","harbour","council","budget","infrastructure"]}}`...)
}
