package client_test

// What a new user tripped on: an outbox entry that said it was not kept,
// and a bus certificate the client does not trust retried as if it were a
// network failure.

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/storybus/storybus/client"
)

// downURL is an http URL where nothing listens.
func downURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	return url
}

// A message kept in the outbox says so in its entry, as in the error the
// caller gets: with one attempt, and after a resend that failed again.
func TestAKeptEntrySaysItIsKept(t *testing.T) {
	s := newSetup(t, downURL(t), nil, func(o *client.Options) { o.Retry = client.RetryPolicy{Attempts: 1} })
	_, err := s.client.Publish(context.Background(), snapshot(t, "", "story-kept", 1, "draft"))
	e, ok := client.AsError(err)
	if !ok || !e.Kept || !strings.Contains(e.Error(), "kept in the outbox") {
		t.Fatalf("not kept: %v", err)
	}
	check := func(when string) {
		t.Helper()
		entries, err := s.outbox.List()
		if err != nil || len(entries) != 1 {
			t.Fatalf("%s: %d entries, %v", when, len(entries), err)
		}
		if r := entries[0].Reason; strings.Contains(r, "not kept") || !strings.Contains(r, "kept in the outbox") {
			t.Fatalf("%s: the entry's reason says %q", when, r)
		}
	}
	check("after the publish")
	results, err := s.client.Resend(context.Background())
	if err != nil || len(results) != 1 || !client.IsKept(results[0].Err) {
		t.Fatalf("resend: %+v %v", results, err)
	}
	check("after a failed resend")
}

// A bus certificate the client does not trust is configuration: the
// message is not retried, never waits, is kept (the bus never judged it),
// and an alert is raised. The token request and a consumer's pull end at
// once the same way.
func TestAnUntrustedCertificateIsNotRetried(t *testing.T) {
	tlsBus := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	tlsBus.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	tlsBus.StartTLS()
	t.Cleanup(tlsBus.Close)
	hc, err := client.NewHTTPClient(client.TLSFiles{}, 0) // the system's roots: not the test server's
	if err != nil {
		t.Fatal(err)
	}
	s := newSetup(t, tlsBus.URL, nil, func(o *client.Options) {
		o.HTTPClient = hc
		o.Tokens = &client.ClientCredentials{URL: tlsBus.URL, Workspace: workspaceID, ClientID: "cms", ClientSecret: cmsSecret, HTTPClient: hc}
	})
	_, err = s.client.Publish(context.Background(), snapshot(t, "", "story-tls", 1, "draft"))
	e, ok := client.AsError(err)
	if !ok || !errors.Is(err, client.ErrUntrustedCertificate) {
		t.Fatalf("not an untrusted certificate: %v", err)
	}
	if e.Temporary() || e.Refused() || !e.NeedsAlert() || e.Class() != client.ClassNotAllowed || !e.Kept {
		t.Fatalf("handled as temporary %v, refused %v, alert %v, class %s, kept %v", e.Temporary(), e.Refused(), e.NeedsAlert(), e.Class(), e.Kept)
	}
	if sleeps := s.clock.Sleeps(); len(sleeps) != 0 {
		t.Fatalf("waited %v before giving up", sleeps)
	}
	if len(s.alerts) != 1 || !strings.Contains(e.Error(), "CA") {
		t.Fatalf("%d alerts; %q", len(s.alerts), e.Error())
	}

	consumer, err := client.NewConsumer(client.ConsumerOptions{URL: tlsBus.URL, Workspace: workspaceID, Name: "website",
		Tokens: client.StaticToken("t"), HTTPClient: hc, Clock: s.clock})
	if err != nil {
		t.Fatal(err)
	}
	err = consumer.Run(context.Background(), func(context.Context, client.Delivery) error { return nil })
	if !errors.Is(err, client.ErrUntrustedCertificate) || len(s.clock.Sleeps()) != 0 {
		t.Fatalf("the consumer's Run: %v, waits %v", err, s.clock.Sleeps())
	}
}
