// Command publish gets a token and publishes one story.context with nothing
// but the types and client that oapi-codegen generates from
// docs/openapi.yaml. make test-openapi-generators generates them beside this
// file and builds it (it need not run), so that the description keeps
// giving Go producers typed messages and answers: a SOMMessage built from
// its typed variant, constants as typed values, and each status's answer.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/google/uuid"
)

func main() {
	// storybus dev's address, workspace and public development credentials.
	url := flag.String("url", "http://127.0.0.1:8080", "the bus's publish port")
	flag.Parse()
	if err := run(context.Background(), *url, "newsroom", "cms", "cms-dev-secret-0123456789abcdef0"); err != nil {
		fmt.Fprintln(os.Stderr, "publish:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, server, workspace, clientID, secret string) error {
	c, err := NewClientWithResponses(server)
	if err != nil {
		return err
	}
	tok, err := c.IssueTokenWithFormdataBodyWithResponse(ctx, workspace, nil,
		IssueTokenFormdataRequestBody{GrantType: ClientCredentials, ClientId: &clientID, ClientSecret: &secret})
	if err != nil {
		return err
	}
	if tok.JSON200 == nil || tok.JSON200.TokenType != Bearer {
		return fmt.Errorf("token: %s %s", tok.Status(), tok.Body)
	}
	bearer := func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+tok.JSON200.AccessToken)
		return nil
	}

	desk, language := "local", "en"
	var msg SOMMessage
	if err := msg.FromStoryContextMessage(StoryContextMessage{
		SomVersion:  N10,
		MessageId:   uuid.New(),
		MessageType: StoryContextMessageMessageTypeStoryContext,
		SystemId:    "cms",
		Timestamp:   time.Now().UTC(),
		Payload: StoryContext{
			StoryId:        "story-0001",
			SequenceNumber: 1,
			State:          StoryContextStateDraft,
			Headline:       "Council approves new harbour bridge",
			Desk:           &desk,
			Language:       &language,
			Assets:         &[]StoryAsset{{Ref: "https://media.example/assets/42", Kind: Image}},
		},
	}); err != nil {
		return err
	}
	// The typed variant comes back out by its discriminator.
	if v, err := msg.ValueByDiscriminator(); err != nil {
		return err
	} else if sc, ok := v.(StoryContextMessage); !ok || sc.Payload.State != StoryContextStateDraft {
		return errors.New("the message does not read back as a story.context draft")
	}

	res, err := c.PublishMessageWithResponse(ctx, workspace, &PublishMessageParams{}, msg, bearer)
	if err != nil {
		return err // no answer: resend the same bytes
	}
	switch {
	case res.JSON202 != nil && res.JSON202.Accepted == AcceptedAcceptedTrue:
		fmt.Println("accepted", res.JSON202.MessageId, res.JSON202.Family, len(res.JSON202.Tolerated), "warnings")
	case res.JSON200 != nil && res.JSON200.Duplicate == DuplicateDuplicateTrue:
		fmt.Println("already published", res.JSON200.MessageId)
	case res.JSON400 != nil:
		v := res.JSON400.Violations[0]
		return fmt.Errorf("refused: %s at %v", v.Rule, v.Path)
	case res.JSON503 != nil:
		return fmt.Errorf("unavailable (%s), retry after %s s", res.JSON503.Violations[0].Rule, res.HTTPResponse.Header.Get("Retry-After"))
	default:
		return fmt.Errorf("%s: %s", res.Status(), res.Body)
	}
	return nil
}
