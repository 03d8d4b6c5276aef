package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
)

// TestClassify: each error a store operation returns has one kind, however
// it is wrapped; and whatever the classifier does not know may have
// landed.
func TestClassify(t *testing.T) {
	apiErr := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("nats: %w", &jetstream.APIError{Code: 400, ErrorCode: code, Description: "refused"})
	}
	for _, tc := range []struct {
		name string
		err  error
		want store.ErrorKind
	}{
		{"nil", nil, store.KindNone},
		{"key exists (Create)", jetstream.ErrKeyExists, store.KindConflict},
		{"revision mismatch (Update, Delete)", jetstream.ErrKeyRevisionMismatch, store.KindConflict},
		{"wrong last sequence", apiErr(jetstream.JSErrCodeStreamWrongLastSequence), store.KindConflict},
		{"wrong last sequence, replicated stream", apiErr(jetstream.JSErrCodeStreamWrongLastSequenceConstant), store.KindConflict},
		{"wrapped conflict", fmt.Errorf("take over record: %w", jetstream.ErrKeyExists), store.KindConflict},
		{"key not found", jetstream.ErrKeyNotFound, store.KindMissing},
		{"key deleted", jetstream.ErrKeyDeleted, store.KindMissing},
		{"message not found", jetstream.ErrMsgNotFound, store.KindMissing},
		{"the store answered no", apiErr(jetstream.JSErrCodeStreamMessageExceedsMaximum), store.KindDefiniteFailure},
		{"no responders", nats.ErrNoResponders, store.KindDefiniteFailure},
		{"no stream response", jetstream.ErrNoStreamResponse, store.KindDefiniteFailure},
		{"bad subject, not sent", nats.ErrBadSubject, store.KindDefiniteFailure},
		{"invalid key, not sent", jetstream.ErrInvalidKey, store.KindDefiniteFailure},
		{"invalid message, not sent", nats.ErrInvalidMsg, store.KindDefiniteFailure},
		{"over the largest payload, not sent", nats.ErrMaxPayload, store.KindDefiniteFailure},
		{"marked not written", errors.Join(store.ErrNotWritten, errors.New("injected")), store.KindDefiniteFailure},
		{"the same message id in process (a replicated stream's answer)", apiErr(10158), store.KindMayHaveLanded},
		{"timeout", nats.ErrTimeout, store.KindMayHaveLanded},
		{"deadline", context.DeadlineExceeded, store.KindMayHaveLanded},
		{"canceled", context.Canceled, store.KindMayHaveLanded},
		{"connection closed while waiting", nats.ErrConnectionClosed, store.KindMayHaveLanded},
		{"unreadable acknowledgement", jetstream.ErrInvalidJSAck, store.KindMayHaveLanded},
		{"unknown", errors.New("something else"), store.KindMayHaveLanded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := store.Classify(tc.err)
			if got != tc.want {
				t.Fatalf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
			for kind, is := range map[store.ErrorKind]func(error) bool{
				store.KindConflict:        store.IsConflict,
				store.KindMissing:         store.IsMissing,
				store.KindDefiniteFailure: store.IsDefiniteFailure,
				store.KindMayHaveLanded:   store.MayHaveLanded,
			} {
				if is(tc.err) != (kind == tc.want) {
					t.Errorf("the helper for %v says %v", kind, is(tc.err))
				}
			}
		})
	}
}

// TestClassifyTheStoresOwnErrors: the errors a real JetStream returns for
// each case are classified as the table above says.
func TestClassifyTheStoresOwnErrors(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, err := st.OpenWorkspace(ctx, "newsroom", 7*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := ws.Records.Create(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	subject := store.Subject("newsroom", "story-context", "s1")
	ack, err := st.JS.Publish(ctx, subject, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error, want store.ErrorKind) {
		t.Helper()
		if got := store.Classify(err); got != want {
			t.Errorf("%s: %v is %v, want %v", what, err, got, want)
		}
	}
	_, err = ws.Records.Create(ctx, "k", []byte("2"))
	check("create over a record", err, store.KindConflict)
	_, err = ws.Records.Update(ctx, "k", []byte("2"), rev+10)
	check("update at another revision", err, store.KindConflict)
	check("delete at another revision", ws.Records.Delete(ctx, "k", jetstream.LastRevision(rev+10)), store.KindConflict)
	_, err = st.JS.Publish(ctx, subject, []byte("{}"), jetstream.WithExpectLastSequencePerSubject(ack.Sequence+10))
	check("publish over another head", err, store.KindConflict)
	_, err = ws.Records.Get(ctx, "absent")
	check("get an absent record", err, store.KindMissing)
	_, err = ws.Stream.GetLastMsgForSubject(ctx, store.Subject("newsroom", "story-context", "absent"))
	check("read an absent story", err, store.KindMissing)
	_, err = ws.Stream.GetMsg(ctx, ack.Sequence+1, jetstream.WithGetMsgSubject(subject))
	check("read past a story's last message", err, store.KindMissing)
	_, err = st.JS.Publish(ctx, "nostream.x", []byte("{}"))
	check("publish where no stream listens", err, store.KindDefiniteFailure)
	_, err = ws.Records.Create(ctx, "not a key", []byte("1"))
	check("create under an invalid key", err, store.KindDefiniteFailure)
	full, err := st.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "full", Subjects: []string{"full.>"}, MaxMsgs: 1, Discard: jetstream.DiscardNew})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.JS.Publish(ctx, "full.x", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_, err = st.JS.Publish(ctx, "full.x", []byte("{}"))
	check("publish to a full stream", err, store.KindDefiniteFailure)
	info, err := full.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("the full stream holds %d messages: the refused publish landed", info.State.Msgs)
	}
	over := make([]byte, 2<<20) // over the server's largest payload
	_, err = st.JS.Publish(ctx, subject, over)
	check("publish over the largest payload", err, store.KindDefiniteFailure)

	st.Close()
	_, err = ws.Records.Update(ctx, "k", []byte("3"), rev)
	check("update on a closed connection", err, store.KindMayHaveLanded)
}
