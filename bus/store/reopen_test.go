package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/store"
)

// TestReopenLooksUpWhatIsUnchanged: opening a workspace whose topic and
// records bucket already have the bus's settings leaves them as they are
// (looked up, not updated), and opening it with other settings, or over a
// stream someone changed, updates them to the bus's.
func TestReopenLooksUpWhatIsUnchanged(t *testing.T) {
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	st, err := store.Connect(store.Options{Embedded: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()
	window := 7 * 24 * time.Hour
	if _, err := st.OpenWorkspace(ctx, "newsroom", window, 0); err != nil {
		t.Fatal(err)
	}
	topic := func() (maxAge time.Duration, desc string) {
		t.Helper()
		s, err := st.JS.Stream(ctx, store.StreamName("newsroom"))
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxAge, s.CachedInfo().Config.Description
	}
	created := func(name string) time.Time {
		t.Helper()
		s, err := st.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Created
	}
	records := "KV_" + store.RecordsBucket("newsroom")
	topicCreated, recordsCreated := created(store.StreamName("newsroom")), created(records)

	// The same settings: both are found as they are.
	if _, err := st.OpenWorkspace(ctx, "newsroom", window, 0); err != nil {
		t.Fatal(err)
	}
	if created(store.StreamName("newsroom")) != topicCreated || created(records) != recordsCreated {
		t.Fatal("a reopen made the streams again")
	}

	// Other settings: updated.
	if _, err := st.OpenWorkspace(ctx, "newsroom", window, 30*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if age, _ := topic(); age != 30*24*time.Hour {
		t.Fatalf("the topic keeps messages %s after a reopen with a 720h retention", age)
	}

	// A stream changed behind the bus's back is put back.
	s, err := st.JS.Stream(ctx, store.StreamName("newsroom"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Description = "changed by hand"
	if _, err := st.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := st.OpenWorkspace(ctx, "newsroom", window, 0); err != nil {
		t.Fatal(err)
	}
	if age, desc := topic(); age != 0 || desc != "storybus topic of workspace newsroom" {
		t.Fatalf("after a reopen the topic keeps messages %s and is described %q", age, desc)
	}
	if created(store.StreamName("newsroom")) != topicCreated {
		t.Fatal("the topic was made again rather than updated")
	}
}
