package main_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/testutil"
)

// TestServeKeepsAStoryInOrderAsItsSoleWriter: serve on its embedded store
// is its topic's sole writer (it says so at start), and producers racing
// on one story through its API still leave the story in order on the
// topic, every 202 there once. With --nats-listen it is not the sole
// writer.
func TestServeKeepsAStoryInOrderAsItsSoleWriter(t *testing.T) {
	dir := t.TempDir()
	cfg, data, addr := writeConfig(t, dir), filepath.Join(dir, "data"), testutil.FreeAddr(t)
	b := startBus(t, cfg, data, addr)
	b.waitLog(t, `"soleWriter":true`)
	token := b.token(t)

	var mu sync.Mutex
	accepted := 0
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 11))
			for range 12 {
				body := []byte(fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"raced","sequence_number":%d,"state":"draft","headline":"Harbour bridge approved"}}`,
					uuid.NewString(), 1+rng.IntN(40)))
				status, _, err := b.send(token, body)
				switch {
				case err != nil:
					t.Errorf("no answer: %v", err)
				case status == http.StatusAccepted:
					mu.Lock()
					accepted++
					mu.Unlock()
				case status != http.StatusConflict: // sequence.stale
					t.Errorf("answer %d", status)
				}
			}
		})
	}
	wg.Wait()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	<-b.done

	order := storyOrder(t, data, "raced")
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("the story is out of order on the topic: %v", order)
		}
	}
	if len(order) != accepted {
		t.Fatalf("the topic holds %d snapshots of the story, %d were answered 202", len(order), accepted)
	}

	listening := startBus(t, cfg, filepath.Join(dir, "listening"), testutil.FreeAddr(t), "--nats-listen", testutil.FreeAddr(t))
	listening.waitLog(t, `"soleWriter":false`)
}

// waitLog waits, up to 30 s, until the process has logged text.
func (b *bus) waitLog(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.logs.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("the bus did not log %s:\n%s", text, b.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// storyOrder reads the sequence numbers of a story's snapshots in the
// topic's order, from the data directory with an embedded server of its
// own.
func storyOrder(t *testing.T, dataDir, story string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream := topicOf(t, dataDir)
	subject := store.Subject("newsroom", som.FamilyStoryContext, story)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var order []int64
	for range info.State.Subjects[subject] {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(m.Headers().Get(publish.HeaderSequence), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, n)
	}
	return order
}
