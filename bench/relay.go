package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
)

// relay is the floor under the bus: a handler on the bus's own HTTP stack
// (its gin engine and http.Server settings, served on a loopback port of
// its own to the same HTTP client) that does only what any HTTP front of
// JetStream must: read the body, decode message_id and story_id, create the
// message's record for the two-write relay, publish once to the story
// subject with Nats-Msg-Id, answer 202. No token check, no validation, no
// idempotency, no snapshot order.
type relay struct {
	js   jetstream.JetStream
	api  *http.Server
	base string
	// workspaces holds the *relayWorkspace of every open relay phase by
	// workspace id, the {t} of its route.
	workspaces sync.Map
}

// relayWorkspace is one relay phase's fresh stream and bucket.
type relayWorkspace struct {
	ws *store.Workspace
	// twoWrite creates the message's record before the publish.
	twoWrite bool
}

// relayMessage is what the relay reads of a message.
type relayMessage struct {
	MessageID string `json:"message_id"`
	Payload   struct {
		StoryID string `json:"story_id"`
	} `json:"payload"`
}

// startRelay serves the relay on a loopback port.
func startRelay(js jetstream.JetStream, log *slog.Logger) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{js: js, base: "http://" + ln.Addr().String()}
	engine := bus.NewEngine(nil)
	engine.POST("/v1/tenants/:tenant/messages", r.publish)
	r.api = bus.NewHTTPServer(engine, slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	go func() { _ = r.api.Serve(ln) }()
	return r, nil
}

// url is the publish route of workspace ws.
func (r *relay) url(ws string) string { return r.base + "/v1/tenants/" + ws + "/messages" }

// publish is the relay's handler.
func (r *relay) publish(c *gin.Context) {
	v, ok := r.workspaces.Load(c.Param("tenant"))
	if !ok {
		c.String(http.StatusNotFound, "no such relay workspace\n")
		return
	}
	rw := v.(*relayWorkspace)
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, bus.MaxBodyBytes+1))
	if err != nil || len(body) > bus.MaxBodyBytes {
		c.String(http.StatusBadRequest, "unreadable or too large body\n")
		return
	}
	var m relayMessage
	if err := json.Unmarshal(body, &m); err != nil || m.MessageID == "" || m.Payload.StoryID == "" {
		c.String(http.StatusBadRequest, "no message_id or story_id\n")
		return
	}
	ctx := c.Request.Context()
	if rw.twoWrite {
		if _, err := rw.ws.Records.Create(ctx, store.EncodeToken(m.MessageID), recordValue(body, "recorded")); err != nil {
			c.String(http.StatusServiceUnavailable, "record create: %v\n", err)
			return
		}
	}
	msg := &nats.Msg{
		Subject: store.Subject(rw.ws.ID, som.FamilyStoryContext, m.Payload.StoryID),
		Data:    body,
		Header:  nats.Header{nats.MsgIdHdr: []string{m.MessageID}},
	}
	if _, err := r.js.PublishMsg(ctx, msg); err != nil {
		c.String(http.StatusServiceUnavailable, "publish: %v\n", err)
		return
	}
	answer := make([]byte, 0, 40+len(m.MessageID))
	answer = append(answer, `{"accepted":true,"message_id":`...)
	answer = fmt.Appendf(answer, "%q}", m.MessageID)
	c.Data(http.StatusAccepted, "application/json", answer)
}

// relayTarget posts messages to one relay phase's workspace.
type relayTarget struct {
	wsStore
	poster
	r *relay
}

func (t *relayTarget) settle() {}

func (t *relayTarget) remove(ctx context.Context) error {
	t.r.workspaces.Delete(t.id)
	return t.wsStore.remove(ctx)
}
