package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bench"
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
// through the whole handler, the store included (about 197 measured).
const maxAllocsPerAccepted = 230

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
// story through the bus's handler, set up as serve sets it up on its
// embedded store (the topic's sole writer), and fails unless it is
// accepted.
func acceptedPublisher(t testing.TB) func() {
	h := newHarness(t, func(o *bus.Options) { o.SoleWriter = true })
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	handler := h.srv.Handler()
	header := http.Header{}
	header.Set("Authorization", "Bearer "+tok)
	header.Set("Content-Type", "application/json")
	target, _ := url.Parse("/v1/tenants/newsroom/messages")
	var w discardWriter
	seq := int64(0)
	return func() {
		seq++
		body := bench.Snapshot(uuid.NewString(), "cms", "story-bench", seq, time.Now())
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
