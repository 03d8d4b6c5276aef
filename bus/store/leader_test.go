package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// TestLeaderReadsAsTheStreamHoldsIt: a read from the leader gives what a
// direct get gives, headers, data and the server's timestamp included;
// for a key-value bucket, the entry jetstream.KeyValue gives, no entry for
// a deleted key, and only the key's own revisions.
func TestLeaderReadsAsTheStreamHoldsIt(t *testing.T) {
	_, st := storetest.Embedded(t)
	ctx := context.Background()
	ws, err := st.OpenWorkspace(ctx, "newsroom", 7*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	subject := store.Subject("newsroom", "story-context", "s1")
	for _, body := range []string{"first", "second"} {
		m := &nats.Msg{Subject: subject, Data: []byte(body), Header: nats.Header{"Storybus-Sequence": []string{body}}}
		if _, err := st.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	direct, err := ws.Stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	led, err := ws.StreamLeader.LastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if led.Sequence != direct.Sequence || string(led.Data) != "second" || led.Header.Get("Storybus-Sequence") != "second" ||
		!led.Time.Equal(direct.Time) || led.Subject != subject {
		t.Fatalf("leader read %+v; the direct get read %+v", led, direct)
	}
	first, err := ws.StreamLeader.GetMsg(ctx, direct.Sequence-1)
	if err != nil || string(first.Data) != "first" {
		t.Fatalf("the first message from the leader: %+v, %v", first, err)
	}
	if _, err := ws.StreamLeader.LastMsgForSubject(ctx, store.Subject("newsroom", "story-context", "none")); !errors.Is(err, jetstream.ErrMsgNotFound) || !store.IsMissing(err) {
		t.Fatalf("a story without a message: %v", err)
	}
	if _, err := ws.StreamLeader.GetMsg(ctx, direct.Sequence+10); !store.IsMissing(err) {
		t.Fatalf("a sequence past the last: %v", err)
	}

	rev, err := ws.Records.Create(ctx, "k1", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := ws.Records.Create(ctx, "k2", []byte("v2"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := ws.Records.Get(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ws.RecordsLeader.Get(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Key() != "k1" || got.Bucket() != store.RecordsBucket("newsroom") || string(got.Value()) != "v1" ||
		got.Revision() != rev || !got.Created().Equal(want.Created()) || got.Operation() != jetstream.KeyValuePut {
		t.Fatalf("the leader's entry %+v; the bucket's %+v", got, want)
	}
	if got, err := ws.RecordsLeader.GetRevision(ctx, "k1", rev); err != nil || got.Revision() != rev {
		t.Fatalf("k1 at its revision: %v, %v", got, err)
	}
	if _, err := ws.RecordsLeader.GetRevision(ctx, "k1", other); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("k1 at k2's revision: %v", err)
	}
	if err := ws.Records.Delete(ctx, "k1", jetstream.LastRevision(rev)); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.RecordsLeader.Get(ctx, "k1"); !errors.Is(err, jetstream.ErrKeyNotFound) || !store.IsMissing(err) {
		t.Fatalf("a deleted key: %v", err)
	}
	if _, err := ws.RecordsLeader.Get(ctx, "never"); !store.IsMissing(err) {
		t.Fatalf("a key never written: %v", err)
	}
}
