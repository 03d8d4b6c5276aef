package client_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/config/dev"
	"github.com/storybus/storybus/config/samples"
)

// docsBus, while TestDocsRunInSequence runs, is the one bus every example
// runs against.
var docsBus *testBus

// startSampleBus starts a bus as startBus does, serving `storybus dev`'s
// sample workspace (config/dev/workspace-newsroom.yaml: connections cms and
// wire with their public development secrets, a sandbox).
func startSampleBus(natsListen ...string) (*testBus, error) {
	b, err := startBus(natsListen...)
	if err != nil {
		return nil, err
	}
	w, err := config.Parse(dev.Workspace)
	if err == nil {
		// Applied over startBus's own workspace, as a reload would.
		err = b.srv.Apply(context.Background(), w)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// TestDocsRunInSequence runs what a new user pastes, in the order the
// documentation gives it, against one bus serving `storybus dev`'s sample
// workspace: the README's curl pair (202, then 200 duplicate), then the Go
// examples of docs/producers.md and docs/consumers.md. Each prints what its
// page says it prints; the NATS example, reading every snapshot of the
// topic, prints the producer example's too.
func TestDocsRunInSequence(t *testing.T) {
	b, err := startSampleBus("127.0.0.1:-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	docsBus = b
	t.Cleanup(func() { docsBus = nil })

	readme := readDoc(t, "../README.md")
	answers := regexp.MustCompile("(?s)```json\n(.*?)\n```").FindAllStringSubmatch(readme, 2)
	if len(answers) != 2 {
		t.Fatalf("the README shows %d answers of the curl pair, want 2", len(answers))
	}
	for i, want := range answers {
		if got := pastePair(t, b.URL); got != want[1] {
			t.Fatalf("paste %d of the curl pair answered\n%s\nthe README says\n%s", i+1, got, want[1])
		}
	}

	producers, consumers := printed(t, "../docs/producers.md"), printed(t, "../docs/consumers.md")
	if len(producers) < 1 || len(consumers) < 2 {
		t.Fatalf("the pages show %d and %d outputs", len(producers), len(consumers))
	}
	if got := stdoutOf(t, Example_producer); got != producers[0] {
		t.Fatalf("after the README, the producer example printed\n%s\ndocs/producers.md says\n%s", got, producers[0])
	}
	if got := stdoutOf(t, Example_consumer); got != consumers[0] {
		t.Fatalf("after the producer example, the consumer example printed\n%s\ndocs/consumers.md says\n%s", got, consumers[0])
	}
	story := base64.RawURLEncoding.EncodeToString([]byte("story-0002"))
	want := consumers[1] + fmt.Sprintf("9b2e4f71-0c3d-4a5b-8e6f-7a8b9c0d1e2f som.newsroom.story-context.%s 2\n", story)
	if got := stdoutOf(t, Example_nats); got != want {
		t.Fatalf("after the other examples, the NATS example printed\n%s\nwant\n%s", got, want)
	}
}

// pastePair does what `storybus dev`'s curl pair does: a token for cms,
// then the sample message published with it. It returns the answer.
func pastePair(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/tenants/"+samples.WorkspaceID+"/tokens", strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(samples.CMSClientID, samples.CMSSecret)
	token := regexp.MustCompile(`"access_token":"([^"]+)"`).FindStringSubmatch(do(t, req))
	if token == nil {
		t.Fatal("no token")
	}
	req, _ = http.NewRequest(http.MethodPost, url+"/v1/tenants/"+samples.WorkspaceID+"/messages", strings.NewReader(samples.MessageSample))
	req.Header.Set("Authorization", "Bearer "+token[1])
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

func do(t *testing.T, req *http.Request) string {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b))
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// printed returns the outputs a page shows of its Go blocks, in order.
func printed(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(goOutput).FindAllStringSubmatch(readDoc(t, path), -1) {
		out = append(out, m[1])
	}
	return out
}

// stdoutOf runs an example and returns what it wrote on stdout.
func stdoutOf(t *testing.T, example func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	read := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		read <- string(b)
	}()
	example() // an example that fails ends the test binary (log.Fatal)
	os.Stdout = stdout
	w.Close()
	return <-read
}
