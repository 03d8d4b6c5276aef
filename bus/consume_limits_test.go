package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// consumersOf returns the names of the topic's durable consumers that the
// connection owns.
func consumersOf(t *testing.T, js jetstream.JetStream, connection string) []string {
	t.Helper()
	var names []string
	topic, err := js.Stream(context.Background(), store.StreamName("newsroom"))
	if err != nil {
		t.Fatal(err)
	}
	list := topic.ListConsumers(context.Background())
	for info := range list.Info() {
		if info.Config.Metadata[store.ConsumerMetadataConnection] == connection {
			names = append(names, info.Name)
		}
	}
	if err := list.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestConsumersPerConnectionAreLimited: a connection creates at most its
// limit of durable consumers, also when its pulls race on two replicas;
// its existing consumers keep working, and other connections are not
// affected.
func TestConsumersPerConnectionAreLimited(t *testing.T) {
	ns := startNATS(t)
	o := bus.Options{Consumers: &store.ConsumerLimits{PerConnection: 3}}
	replicas := []*harness{newReplicaWith(t, ns, o, consumerConfig("newsroom")), newReplicaWith(t, ns, o, consumerConfig("newsroom"))}
	h := replicas[0]
	reader := h.token(t, "newsroom", "reader", readerSecret)
	for _, name := range []string{"one", "two", "three"} {
		if _, a := h.pull(t, "newsroom", name, reader, ""); a.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", name, a.Status, a.Raw)
		}
	}
	_, a := h.pull(t, "newsroom", "four", reader, "")
	expect(t, a, http.StatusForbidden, rules.ConsumerLimitReached)
	if _, a := replicas[1].pull(t, "newsroom", "four", reader, ""); a.Status != http.StatusForbidden {
		t.Fatalf("another replica created a fourth consumer: %d", a.Status)
	}
	if _, a := h.pull(t, "newsroom", "two", reader, ""); a.Status != http.StatusOK {
		t.Fatalf("an existing consumer: %d %s", a.Status, a.Raw)
	}

	// Eight new names at once, through both replicas: three stay.
	all := h.token(t, "newsroom", "all", allSecret)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/tenants/newsroom/consumers/race-%d/messages", replicas[i%2].http.URL, i), nil)
			req.Header.Set("Authorization", "Bearer "+all)
			res, err := post2(req)
			switch {
			case err != nil:
				t.Error(err)
			case res.status == http.StatusOK:
				ok.Add(1)
			case res.status == http.StatusForbidden && res.rule == rules.ConsumerLimitReached:
				refused.Add(1)
			default:
				t.Errorf("race-%d: %d %s", i, res.status, res.rule)
			}
		})
	}
	wg.Wait()
	js := connectStore(t, ns).JS
	if ok.Load() != 3 || refused.Load() != 5 {
		t.Fatalf("%d created, %d refused; want 3 and 5", ok.Load(), refused.Load())
	}
	if got := consumersOf(t, js, "all"); len(got) != 3 {
		t.Fatalf("all has consumers %v, want 3", got)
	}
	if got := consumersOf(t, js, "reader"); len(got) != 3 {
		t.Fatalf("reader has consumers %v, want 3", got)
	}
}

// post2 sends a request without failing the test (for goroutines) and
// reduces the answer to its status and rule.
func post2(req *http.Request) (postResult, error) {
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return postResult{}, err
	}
	defer res.Body.Close()
	out := postResult{status: res.StatusCode}
	if res.StatusCode != http.StatusOK {
		var ans struct {
			Violations []rules.Violation `json:"violations"`
		}
		if err := json.NewDecoder(res.Body).Decode(&ans); err != nil || len(ans.Violations) == 0 {
			return out, fmt.Errorf("answer %d: %v", res.StatusCode, err)
		}
		out.rule = ans.Violations[0].Rule
	}
	return out, nil
}

// TestIdleConsumersAreRemoved: durable consumers carry the inactivity
// threshold, those made before it was set get it on their next use, and an
// idle one is removed by JetStream, freeing its place under the limit.
func TestIdleConsumersAreRemoved(t *testing.T) {
	ns := startNATS(t)
	h := newReplicaWith(t, ns, bus.Options{Consumers: &store.ConsumerLimits{PerConnection: 1, InactiveThreshold: time.Second}}, consumerConfig("newsroom"))
	reader := h.token(t, "newsroom", "reader", readerSecret)
	js := connectStore(t, ns).JS
	ctx := context.Background()

	// A consumer made before the threshold existed has none.
	_, err := js.CreateConsumer(ctx, store.StreamName("newsroom"), jetstream.ConsumerConfig{
		Durable: "old", AckPolicy: jetstream.AckExplicitPolicy, FilterSubjects: []string{"som.newsroom.story-context.>"},
		Metadata: map[string]string{store.ConsumerMetadataConnection: "reader"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, a := h.pull(t, "newsroom", "old", reader, ""); a.Status != http.StatusOK {
		t.Fatalf("old: %d %s", a.Status, a.Raw)
	}
	c, err := js.Consumer(ctx, store.StreamName("newsroom"), "old")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.InactiveThreshold; got != time.Second {
		t.Fatalf("inactive threshold %s, want 1s", got)
	}
	_, a := h.pull(t, "newsroom", "new", reader, "")
	expect(t, a, http.StatusForbidden, rules.ConsumerLimitReached)

	eventually(t, "the idle consumer is removed", func() bool {
		_, err := js.Consumer(ctx, store.StreamName("newsroom"), "old")
		return errors.Is(err, jetstream.ErrConsumerNotFound)
	})
	if _, a := h.pull(t, "newsroom", "new", reader, ""); a.Status != http.StatusOK {
		t.Fatalf("new, after the idle one went: %d %s", a.Status, a.Raw)
	}
	c, err = js.Consumer(ctx, store.StreamName("newsroom"), "new")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.InactiveThreshold; got != time.Second {
		t.Fatalf("a new consumer's inactive threshold %s, want 1s", got)
	}
}
