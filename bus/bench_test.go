package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
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
