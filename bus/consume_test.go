package bus_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

const (
	readerSecret = "reader-secret-0123456789abcdef0123456789"
	allSecret    = "all-secret-0123456789abcdef0123456789"
)

// consumerConfig is workspaceConfig with two consumer connections: reader
// may read snapshots only, all may read every family.
func consumerConfig(id string) *config.Workspace {
	w := workspaceConfig(id)
	w.Connections = append(w.Connections,
		config.Connection{Name: "reader", SecretHash: config.HashSecret(readerSecret),
			Grant: config.Grant{Consume: config.ConsumeGrant{Families: []string{"story-context"}}}},
		config.Connection{Name: "all", SecretHash: config.HashSecret(allSecret),
			Grant: config.Grant{Consume: config.ConsumeGrant{Families: []string{"*"}}}},
	)
	w.Default()
	return w
}

func newConsumeHarness(t *testing.T, options ...func(*bus.Options)) *harness {
	t.Helper()
	h := newHarness(t, options...)
	for _, id := range []string{"newsroom", "other"} {
		if err := h.srv.Apply(context.Background(), consumerConfig(id)); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// pulled is a decoded pull answer.
type pulled struct {
	Messages []bus.Delivery `json:"messages"`
}

// pull asks the consumer for messages. A refusal is checked against the
// documented shape and returned as an answer.
func (h *harness) pull(t *testing.T, ws, name, token, query string) (pulled, answer) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.http.URL+"/v1/tenants/"+ws+"/consumers/"+name+"/messages?"+query, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		return pulled{}, decode(t, res)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	var p pulled
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || len(raw) != 1 || raw["messages"] == nil {
		t.Fatalf("pull answer %s", body)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	for _, d := range p.Messages {
		if d.MessageID == "" || d.MessageType == "" || d.Family == "" || d.AckID == "" || d.Delivery < 1 || len(d.Message) == 0 {
			t.Fatalf("delivery %+v", d)
		}
	}
	return p, answer{Status: http.StatusOK}
}

// pullUntil pulls until at least n messages came, or fails at the deadline.
func (h *harness) pullUntil(t *testing.T, ws, name, token, query string, n int) []bus.Delivery {
	t.Helper()
	var got []bus.Delivery
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d messages", len(got), n)
		}
		p, a := h.pull(t, ws, name, token, query+"&wait=1s")
		if a.Status != http.StatusOK {
			t.Fatalf("pull: %d %s", a.Status, a.Raw)
		}
		got = append(got, p.Messages...)
	}
	return got
}

func (h *harness) ackIDs(t *testing.T, ws, name, token string, ids ...string) (int, answer) {
	t.Helper()
	body, _ := json.Marshal(bus.AckRequest{AckIDs: ids})
	return h.ackRaw(t, ws, name, token, body)
}

func (h *harness) ackRaw(t *testing.T, ws, name, token string, body []byte) (int, answer) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/"+ws+"/consumers/"+name+"/acks", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		return 0, decode(t, res)
	}
	defer res.Body.Close()
	var ar bus.AckResponse
	if err := json.NewDecoder(res.Body).Decode(&ar); err != nil {
		t.Fatal(err)
	}
	return ar.Acked, answer{Status: http.StatusOK}
}

func event(story, system string) []byte {
	return []byte(`{"som_version":"1.0","message_id":"` + uuid.NewString() + `","message_type":"story.event","system_id":"` + system + `","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"` + story + `","event":"published","occurred_at":"2026-11-29T09:00:00Z"}}`)
}

func TestConsumeDeliversMessagesExactlyAsAccepted(t *testing.T) {
	h := newConsumeHarness(t)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	all := h.token(t, "newsroom", "all", allSecret)
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, snapshot("", "story-1", 1, "cms"), "", "  "); err != nil {
		t.Fatal(err)
	}
	snap := pretty.Bytes()
	ev := event("story-1", "cms")
	expect(t, h.post(t, "newsroom", cms, snap), http.StatusAccepted, "")
	expect(t, h.post(t, "newsroom", cms, ev), http.StatusAccepted, "")

	got := h.pullUntil(t, "newsroom", "web", all, "max=10", 2)
	if len(got) != 2 {
		t.Fatalf("got %d messages", len(got))
	}
	if !bytes.Equal(got[0].Message, snap) || !bytes.Equal(got[1].Message, ev) {
		t.Fatalf("messages changed on the way:\n%s\n%s", got[0].Message, got[1].Message)
	}
	if got[0].Family != "story-context" || got[0].MessageType != "story.context" || got[1].Family != "story-event" || got[1].MessageType != "story.event" {
		t.Fatalf("families %+v %+v", got[0], got[1])
	}
	if got[0].Delivery != 1 || got[1].Delivery != 1 {
		t.Fatalf("delivery counts %d %d", got[0].Delivery, got[1].Delivery)
	}
	if n, a := h.ackIDs(t, "newsroom", "web", all, got[0].AckID, got[1].AckID); a.Status != http.StatusOK || n != 2 {
		t.Fatalf("ack: %d %d %s", n, a.Status, a.Raw)
	}
	// Acknowledging twice is harmless.
	if n, a := h.ackIDs(t, "newsroom", "web", all, got[0].AckID); a.Status != http.StatusOK || n != 1 {
		t.Fatalf("second ack: %d %d %s", n, a.Status, a.Raw)
	}
	p, _ := h.pull(t, "newsroom", "web", all, "")
	if len(p.Messages) != 0 {
		t.Fatalf("acknowledged messages delivered again: %+v", p.Messages)
	}
	// A forged ack id is counted with its rule.
	if _, a := h.ackIDs(t, "newsroom", "web", all, "Zm9yZ2Vk"); a.Status != http.StatusBadRequest {
		t.Fatalf("forged ack: %d %s", a.Status, a.Raw)
	}
	metrics := h.metrics(t)
	for _, want := range []string{
		`storybus_consumer_delivered_messages_total{connection="all",workspace="newsroom"} 2`,
		`storybus_consumer_acked_messages_total{action="ack",connection="all",workspace="newsroom"} 3`,
		`storybus_api_requests_total{route="ack",rule="",status="200",workspace="newsroom"} 2`,
		`storybus_api_requests_total{route="ack",rule="consumer.ack_invalid",status="400",workspace="newsroom"} 1`,
		`storybus_api_requests_total{route="tokens",rule="",status="200",workspace="newsroom"} 2`,
		`storybus_api_requests_total{route="pull",rule="",status="200",workspace="newsroom"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestConsumeLongPollAnswersWhenAMessageArrives(t *testing.T) {
	h := newConsumeHarness(t)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	reader := h.token(t, "newsroom", "reader", readerSecret)
	// The first pull creates the consumer; nothing is there yet.
	if p, a := h.pull(t, "newsroom", "desk", reader, "wait=0s"); a.Status != http.StatusOK || len(p.Messages) != 0 {
		t.Fatalf("empty pull: %d %+v", a.Status, p)
	}
	done := make(chan pulled, 1)
	go func() {
		p, _ := h.pull(t, "newsroom", "desk", reader, "wait=20s&max=5")
		done <- p
	}()
	body := snapshot("", "story-lp", 1, "cms")
	expect(t, h.post(t, "newsroom", cms, body), http.StatusAccepted, "")
	select {
	case p := <-done:
		if len(p.Messages) != 1 || !bytes.Equal(p.Messages[0].Message, body) {
			t.Fatalf("long-poll answered %+v", p)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the long-poll did not answer within its wait")
	}
}

// ackWait creates the server's consumers with the ack timeout d.
func ackWait(d time.Duration) func(*bus.Options) {
	return func(o *bus.Options) {
		limits := store.DefaultConsumerLimits()
		limits.AckWait = d
		o.Consumers = &limits
	}
}

func TestConsumeRedeliversAfterTheAckTimeout(t *testing.T) {
	h := newConsumeHarness(t, ackWait(time.Second))
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	reader := h.token(t, "newsroom", "reader", readerSecret)
	body := snapshot("", "story-rd", 1, "cms")
	expect(t, h.post(t, "newsroom", cms, body), http.StatusAccepted, "")
	first := h.pullUntil(t, "newsroom", "slow", reader, "max=1", 1)
	if first[0].Delivery != 1 {
		t.Fatalf("delivery %d", first[0].Delivery)
	}
	// Not acknowledged: it comes again after the ack timeout.
	again := h.pullUntil(t, "newsroom", "slow", reader, "max=1", 1)
	if again[0].MessageID != first[0].MessageID || again[0].Delivery != 2 || again[0].AckID == first[0].AckID {
		t.Fatalf("redelivery %+v after %+v", again[0], first[0])
	}
	if n, a := h.ackIDs(t, "newsroom", "slow", reader, again[0].AckID); a.Status != http.StatusOK || n != 1 {
		t.Fatalf("ack: %d %d", n, a.Status)
	}
	// Acknowledged: a wait of several ack timeouts brings nothing.
	if p, _ := h.pull(t, "newsroom", "slow", reader, "wait=3s"); len(p.Messages) != 0 {
		t.Fatalf("delivered after its ack: %+v", p.Messages)
	}
}

func TestConsumeFollowsTheConsumeGrant(t *testing.T) {
	h := newConsumeHarness(t)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	reader := h.token(t, "newsroom", "reader", readerSecret)
	expect(t, h.post(t, "newsroom", cms, event("story-g", "cms")), http.StatusAccepted, "")
	snap := snapshot("", "story-g", 1, "cms")
	expect(t, h.post(t, "newsroom", cms, snap), http.StatusAccepted, "")

	// reader may read snapshots only: it never sees the event.
	got := h.pullUntil(t, "newsroom", "snaps", reader, "", 1)
	if len(got) != 1 || !bytes.Equal(got[0].Message, snap) {
		t.Fatalf("reader got %+v", got)
	}
	_, a := h.pull(t, "newsroom", "snaps", reader, "family=story-event")
	expect(t, a, http.StatusForbidden, rules.GrantFamily)
	_, a = h.pull(t, "newsroom", "snaps", reader, "family=story-context,asset-reference")
	expect(t, a, http.StatusForbidden, rules.GrantFamily)
	// A publisher with no consume grant may consume nothing.
	_, a = h.pull(t, "newsroom", "mine", cms, "")
	expect(t, a, http.StatusForbidden, rules.GrantFamily)

	// all, asking for events only, gets the event only.
	all := h.token(t, "newsroom", "all", allSecret)
	got = h.pullUntil(t, "newsroom", "events", all, "family=story-event", 1)
	if len(got) != 1 || got[0].Family != "story-event" {
		t.Fatalf("events consumer got %+v", got)
	}
	// Shrinking the grant applies at the next pull.
	cfg := consumerConfig("newsroom")
	cfg.Connections[3].Grant.Consume.Families = []string{"story-event"}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	_, a = h.pull(t, "newsroom", "events", all, "family=story-context")
	expect(t, a, http.StatusForbidden, rules.GrantFamily)
}

func TestConsumerNameBelongsToOneConnection(t *testing.T) {
	h := newConsumeHarness(t)
	reader := h.token(t, "newsroom", "reader", readerSecret)
	all := h.token(t, "newsroom", "all", allSecret)
	if _, a := h.pull(t, "newsroom", "shared", reader, ""); a.Status != http.StatusOK {
		t.Fatalf("first use: %d %s", a.Status, a.Raw)
	}
	_, a := h.pull(t, "newsroom", "shared", all, "")
	expect(t, a, http.StatusConflict, rules.ConsumerNameTaken)
}

func TestConsumeRefusesMalformedRequests(t *testing.T) {
	h := newConsumeHarness(t)
	all := h.token(t, "newsroom", "all", allSecret)
	for _, tc := range []struct{ name, query string }{
		{"max zero", "max=0"},
		{"max too large", "max=101"},
		{"max not a number", "max=ten"},
		{"wait too long", "wait=21s"},
		{"wait negative", "wait=-1s"},
		{"wait not a duration", "wait=soon"},
		{"unknown family", "family=story-gossip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a := h.pull(t, "newsroom", "web", all, tc.query)
			expect(t, a, http.StatusBadRequest, rules.ConsumerRequestInvalid)
		})
	}
	t.Run("bad consumer name", func(t *testing.T) {
		_, a := h.pull(t, "newsroom", strings.Repeat("x", 65), all, "")
		expect(t, a, http.StatusBadRequest, rules.ConsumerRequestInvalid)
		_, a = h.pull(t, "newsroom", "a%2Eb", all, "")
		expect(t, a, http.StatusBadRequest, rules.ConsumerRequestInvalid)
	})
	t.Run("whole seconds and durations", func(t *testing.T) {
		for _, q := range []string{"wait=0", "wait=1", "wait=250ms", "max=100"} {
			if _, a := h.pull(t, "newsroom", "web", all, q); a.Status != http.StatusOK {
				t.Fatalf("%s: %d %s", q, a.Status, a.Raw)
			}
		}
	})
	for name, body := range map[string]string{
		"not JSON":       "ack",
		"no ids":         `{"ack_ids":[]}`,
		"unknown member": `{"ack_ids":["x"],"nak":true}`,
		"trailing data":  `{"ack_ids":["x"]} {}`,
	} {
		t.Run("acks "+name, func(t *testing.T) {
			_, a := h.ackRaw(t, "newsroom", "web", all, []byte(body))
			expect(t, a, http.StatusBadRequest, rules.ConsumerRequestInvalid)
		})
	}
}

func TestConsumeAuthentication(t *testing.T) {
	h := newConsumeHarness(t)
	_, a := h.pull(t, "newsroom", "web", "", "")
	expect(t, a, http.StatusUnauthorized, rules.AuthTokenMissing)
	otherAll := h.token(t, "other", "all", allSecret)
	_, a = h.pull(t, "newsroom", "web", otherAll, "")
	expect(t, a, http.StatusForbidden, rules.WorkspaceMismatch)
	_, a = h.ackIDs(t, "newsroom", "web", otherAll, "eA")
	expect(t, a, http.StatusForbidden, rules.WorkspaceMismatch)

	all := h.token(t, "newsroom", "all", allSecret)
	if _, a := h.pull(t, "newsroom", "web", all, ""); a.Status != http.StatusOK {
		t.Fatalf("active connection: %d %s", a.Status, a.Raw)
	}
	cfg := consumerConfig("newsroom")
	cfg.Connections[3].Active = new(bool)
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	_, a = h.pull(t, "newsroom", "web", all, "")
	expect(t, a, http.StatusForbidden, rules.ConnectionInactive)
}

func TestConsumePassesTheFirewall(t *testing.T) {
	h := newConsumeHarness(t)
	all := h.token(t, "newsroom", "all", allSecret)
	cfg := consumerConfig("newsroom")
	cfg.Firewall.ContentTypes = []string{"application/json"}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	// A pull has no body, and no Content-Type to check.
	if _, a := h.pull(t, "newsroom", "web", all, ""); a.Status != http.StatusOK {
		t.Fatalf("pull under a content-type rule: %d %s", a.Status, a.Raw)
	}
	cfg.Firewall.AllowedCIDRs = []string{"192.0.2.0/24"}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	_, a := h.pull(t, "newsroom", "web", all, "")
	expect(t, a, http.StatusForbidden, rules.RequestBlocked)
	_, a = h.ackIDs(t, "newsroom", "web", all, "eA")
	expect(t, a, http.StatusForbidden, rules.RequestBlocked)
}

func TestAckIDsAreVerifiedToBelongToTheConsumer(t *testing.T) {
	h := newConsumeHarness(t, ackWait(time.Second))
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	all := h.token(t, "newsroom", "all", allSecret)
	otherCMS := h.token(t, "other", "cms", cmsSecret)
	otherAll := h.token(t, "other", "all", allSecret)
	expect(t, h.post(t, "newsroom", cms, snapshot("", "story-a", 1, "cms")), http.StatusAccepted, "")
	expect(t, h.post(t, "other", otherCMS, snapshot("", "story-a", 1, "cms")), http.StatusAccepted, "")
	mine := h.pullUntil(t, "newsroom", "one", all, "", 1)[0]
	two := h.pullUntil(t, "newsroom", "two", all, "", 1)[0]
	foreign := h.pullUntil(t, "other", "one", otherAll, "", 1)[0]

	encoded, mac, _ := strings.Cut(mine.AckID, ".")
	subject, err := base64.RawURLEncoding.DecodeString(encoded)
	if err != nil || !strings.HasPrefix(string(subject), "$JS.ACK.") || mac == "" {
		t.Fatalf("ack_id %q is not an encoded acknowledgement subject and its signature", mine.AckID)
	}
	enc := base64.RawURLEncoding.EncodeToString
	// An invented delivery of the right shape: the sequence numbers of
	// the genuine id changed.
	tokens := strings.Split(string(subject), ".")
	tokens[5], tokens[6] = "999999", "999999"
	invented := strings.Join(tokens, ".")
	for name, id := range map[string]string{
		"an invented delivery, unsigned":               enc([]byte(invented)),
		"an invented delivery, with the genuine's mac": enc([]byte(invented)) + "." + mac,
		"the genuine subject, unsigned":                encoded,
		"the genuine subject, a bad mac":               encoded + "." + enc([]byte("0123456789abcdef")),
		"another consumer's":                           two.AckID,
		"another workspace's":                          foreign.AckID,
		"not base64":                                   "not base64!",
		"not an ack subject":                           enc([]byte("som.newsroom.story-context.x")),
		"a wildcard":                                   enc([]byte("$JS.ACK.som-newsroom.one.>")),
		"a wildcard token":                             enc([]byte("$JS.ACK.som-newsroom.one.1.*.1.1.0")),
		"a forged stream":                              enc([]byte(strings.Replace(string(subject), "som-newsroom", "som-other", 1))),
		"empty":                                        "",
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, a := h.ackIDs(t, "newsroom", "one", all, mine.AckID, id)
			expect(t, a, http.StatusBadRequest, rules.ConsumerAckInvalid)
			// Refused without waiting on the store (whose ack timeout
			// is 5 s).
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the refusal took %s", took)
			}
			if a.Violations[0].Path != "/ack_ids/1" {
				t.Fatalf("path %q", a.Violations[0].Path)
			}
		})
	}
	_, a := h.ackIDs(t, "newsroom", "nobody", all, mine.AckID)
	expect(t, a, http.StatusBadRequest, rules.ConsumerAckInvalid)
	// Nothing was acknowledged by the refused requests: it comes again.
	again := h.pullUntil(t, "newsroom", "one", all, "", 1)[0]
	if again.MessageID != mine.MessageID || again.Delivery < 2 {
		t.Fatalf("after refused acks: %+v", again)
	}
	if n, a := h.ackIDs(t, "newsroom", "one", all, again.AckID); a.Status != http.StatusOK || n != 1 {
		t.Fatalf("ack: %d %d %s", n, a.Status, a.Raw)
	}
}

// The ack route's actions: a nak redelivers at once or after its delay, a
// term never redelivers, in_progress holds a delivery past the ack timeout.
// Each consumer's ack timeout is set when its first pull creates it: each
// is created through a replica of its own ack timeout, then used through h.
func TestAckActions(t *testing.T) {
	h := newConsumeHarness(t)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	reader := h.token(t, "newsroom", "reader", readerSecret)
	act := func(name string, d bus.Delivery, action, delay string) {
		t.Helper()
		body, _ := json.Marshal(bus.AckRequest{AckIDs: []string{d.AckID}, Action: action, Delay: delay})
		if n, a := h.ackRaw(t, "newsroom", name, reader, body); a.Status != http.StatusOK || n != 1 {
			t.Fatalf("%s: %d %d %s", action, n, a.Status, a.Raw)
		}
	}
	// Every consumer starts with the oldest message: each takes its own
	// story's message of the four and acknowledges the others.
	stories := []string{"story-nak", "story-term", "story-wpi", "story-bad"}
	for _, story := range stories {
		expect(t, h.post(t, "newsroom", cms, snapshot("", story, 1, "cms")), http.StatusAccepted, "")
	}
	take := func(name, story string, wait time.Duration) bus.Delivery {
		t.Helper()
		var o bus.Options
		ackWait(wait)(&o)
		creator := newReplicaWith(t, h.ns, o, consumerConfig("newsroom"))
		var mine bus.Delivery
		for _, d := range creator.pullUntil(t, "newsroom", name, reader, "max=10", len(stories)) {
			if bytes.Contains(d.Message, []byte(`"`+story+`"`)) {
				mine = d
			} else {
				body, _ := json.Marshal(bus.AckRequest{AckIDs: []string{d.AckID}})
				if n, a := creator.ackRaw(t, "newsroom", name, reader, body); a.Status != http.StatusOK || n != 1 {
					t.Fatalf("ack: %d %d %s", n, a.Status, a.Raw)
				}
			}
		}
		if mine.AckID == "" {
			t.Fatalf("%s: no message of %s", name, story)
		}
		return mine
	}
	// nothing fails if the consumer is given a message within wait.
	nothing := func(name string, wait time.Duration) {
		t.Helper()
		if p, a := h.pull(t, "newsroom", name, reader, "wait="+wait.String()); a.Status != http.StatusOK || len(p.Messages) != 0 {
			t.Fatalf("%s: delivered %+v (%d)", name, p.Messages, a.Status)
		}
	}

	t.Run("nak", func(t *testing.T) {
		// A long ack timeout: a redelivery can only come from the nak.
		d := take("nak", "story-nak", time.Minute)
		act("nak", d, bus.AckActionNak, "")
		again := h.pullUntil(t, "newsroom", "nak", reader, "max=1", 1)[0]
		if again.MessageID != d.MessageID || again.Delivery != 2 {
			t.Fatalf("after a nak: %+v", again)
		}
		act("nak", again, bus.AckActionNak, "1m")
		nothing("nak", 2*time.Second)
	})
	t.Run("term", func(t *testing.T) {
		// Past the ack timeout, a delivery neither acknowledged nor
		// terminated would come again.
		d := take("term", "story-term", time.Second)
		act("term", d, bus.AckActionTerm, "")
		nothing("term", 3*time.Second)
	})
	t.Run("in_progress", func(t *testing.T) {
		d := take("wpi", "story-wpi", 3*time.Second)
		// Twice the ack timeout, with a progress report every 500 ms.
		for range 12 {
			time.Sleep(500 * time.Millisecond)
			act("wpi", d, bus.AckActionInProgress, "")
		}
		nothing("wpi", time.Second)
		act("wpi", d, bus.AckActionAck, "")
	})
	t.Run("refused", func(t *testing.T) {
		d := take("bad", "story-bad", time.Minute)
		for _, req := range []bus.AckRequest{
			{Action: "retry"}, {Action: bus.AckActionAck, Delay: "1s"}, {Action: bus.AckActionTerm, Delay: "1s"},
			{Action: bus.AckActionNak, Delay: "2h"}, {Action: bus.AckActionNak, Delay: "-1s"}, {Action: bus.AckActionNak, Delay: "soon"},
			{Action: bus.AckActionNak, Delay: "18446744074"},
		} {
			req.AckIDs = []string{d.AckID}
			body, _ := json.Marshal(req)
			_, a := h.ackRaw(t, "newsroom", "bad", reader, body)
			expect(t, a, http.StatusBadRequest, rules.ConsumerRequestInvalid)
		}
	})
	metrics := h.metrics(t)
	for _, want := range []string{
		// By connection: reader's four consumers together.
		`storybus_consumer_acked_messages_total{action="nak",connection="reader",workspace="newsroom"} 2`,
		`storybus_consumer_acked_messages_total{action="term",connection="reader",workspace="newsroom"} 1`,
		`storybus_consumer_acked_messages_total{action="in_progress",connection="reader",workspace="newsroom"} 12`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// Consumer requests accept no message: they count against the
// connection's request rate only, never its daily quota, so a connection
// that has used up its quota still reads.
func TestConsumeIsNotCountedInTheDailyQuota(t *testing.T) {
	h := newConsumeHarness(t)
	w := consumerConfig("newsroom")
	for i := range w.Connections {
		if c := &w.Connections[i]; c.Name == "all" {
			c.Grant.Publish = config.PublishGrant{SystemIDs: []string{"all"}, MessageTypes: []string{"*"}}
			c.Limits = &config.Limits{DailyQuota: 1}
		}
	}
	if err := h.srv.Apply(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	all := h.token(t, "newsroom", "all", allSecret)
	expect(t, h.post(t, "newsroom", all, snapshot("", "story-q", 1, "all")), http.StatusAccepted, "")
	expect(t, h.post(t, "newsroom", all, snapshot("", "story-q", 2, "all")), http.StatusTooManyRequests, rules.QuotaExceeded)
	got := h.pullUntil(t, "newsroom", "quota", all, "max=10", 1)
	if n, a := h.ackIDs(t, "newsroom", "quota", all, got[0].AckID); a.Status != http.StatusOK || n != 1 {
		t.Fatalf("ack with the quota used up: %d %s", a.Status, a.Raw)
	}
}
