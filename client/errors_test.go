package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/storybus/storybus/client"
)

// TestErrorIsOneLine checks that an *Error of an exchange that got no
// answer (a joined cause: ErrNoAnswer and the network error) says it in one
// line, without a program's name: a command line adds its own prefix.
func TestErrorIsOneLine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there
	tokens := &client.ClientCredentials{URL: down, Workspace: "newsroom", ClientID: "cms", ClientSecret: "secret"}
	_, err = tokens.Token(context.Background())
	e, ok := client.AsError(err)
	if !ok || !errors.Is(err, client.ErrNoAnswer) {
		t.Fatalf("not an *Error with no answer: %v", err)
	}
	text := e.Error()
	if strings.Contains(text, "\n") || strings.HasPrefix(text, "storybus:") {
		t.Fatalf("not one line without a program prefix: %q", text)
	}
	if !strings.HasPrefix(text, client.ErrNoAnswer.Error()+": ") || !strings.Contains(text, "refused") {
		t.Fatalf("the causes are not both said: %q", text)
	}

	kept := &client.Error{MessageID: "m-1", Attempts: 2, Kept: true, Err: errors.Join(client.ErrNoAnswer, errors.New("a\nb"))}
	if got, want := kept.Error(), "message m-1: no answer from the bus: a: b after 2 attempts: not delivered yet; kept in the outbox for a later resend"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
