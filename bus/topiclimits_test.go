package bus_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// TestFullTopicIsInsufficientStorage: a workspace whose configuration
// bounds its topic to two messages accepts two, then answers 507
// workspace.storage_full (the documented shape, a request_id, no
// Retry-After) for the next, again and again, while another workspace of
// the bus publishes on; the topic holds exactly the two accepted. A
// changed configuration with a higher limit, applied in place, lets the
// very message publish.
func TestFullTopicIsInsufficientStorage(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	cfg := workspaceConfig("newsroom")
	cfg.Topic.MaxMessages = 2
	if err := h.srv.Apply(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	token := h.token(t, "newsroom", "cms", cmsSecret)
	for seq := 1; seq <= 2; seq++ {
		expect(t, h.post(t, "newsroom", token, snapshot("", "s1", seq, "cms")), http.StatusAccepted, "")
	}
	third := snapshot(uuid.NewString(), "s1", 3, "cms")
	for range 3 {
		a := h.post(t, "newsroom", token, third)
		expect(t, a, http.StatusInsufficientStorage, rules.WorkspaceStorageFull)
		if ra := a.Header.Get("Retry-After"); ra != "" {
			t.Fatalf("507 with Retry-After %s", ra)
		}
		if _, ok := a.Raw["request_id"]; !ok {
			t.Fatalf("507 without request_id: %s", a.Raw)
		}
	}
	other := h.token(t, "other", "cms", cmsSecret)
	expect(t, h.post(t, "other", other, snapshot("", "s1", 1, "cms")), http.StatusAccepted, "")

	st, err := store.Connect(store.Options{Embedded: h.ns})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	info, err := st.JS.Stream(ctx, store.StreamName("newsroom"))
	if err != nil {
		t.Fatal(err)
	}
	if s := info.CachedInfo().State; s.Msgs != 2 || s.FirstSeq != 1 {
		t.Fatalf("full topic holds %d messages from %d, want the 2 accepted", s.Msgs, s.FirstSeq)
	}

	raised := workspaceConfig("newsroom")
	raised.Topic.MaxMessages = 3
	if err := h.srv.Apply(ctx, raised); err != nil {
		t.Fatal(err)
	}
	expect(t, h.post(t, "newsroom", token, third), http.StatusAccepted, "")
	expect(t, h.post(t, "newsroom", token, third), http.StatusOK, "")
}
