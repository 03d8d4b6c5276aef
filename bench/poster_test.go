package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestPosterSendsEachRequestToTheNextURL: with several buses behind the
// front, consecutive requests go to each in turn, so a story's snapshots
// are written through every replica.
func TestPosterSendsEachRequestToTheNextURL(t *testing.T) {
	var counts [3]atomic.Int64
	var urls []string
	for i := range counts {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			counts[i].Add(1)
			w.WriteHeader(http.StatusAccepted)
		}))
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	p := poster{client: http.DefaultClient, urls: urls, next: new(atomic.Uint64)}
	for range 30 {
		if _, err := p.publish(context.Background(), message{body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range counts {
		if n := counts[i].Load(); n != 10 {
			t.Errorf("bus %d got %d of 30 requests, want 10", i, n)
		}
	}
}
