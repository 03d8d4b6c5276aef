package cli

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/storybus/storybus/docs"
)

// TestOpenAPI: `storybus openapi` prints the embedded description, and
// --dir writes it with the SOM schemas its references resolve to.
func TestOpenAPI(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Execute(context.Background(), []string{"openapi"}, nil, &out, &errb); code != ExitOK || !bytes.Equal(out.Bytes(), docs.OpenAPI()) {
		t.Fatalf("exit %d, stderr %s; printed the embedded description: %v", code, errb.String(), bytes.Equal(out.Bytes(), docs.OpenAPI()))
	}

	dir := filepath.Join(t.TempDir(), "api")
	if code := Execute(context.Background(), []string{"openapi", "--dir", dir}, nil, &out, &errb); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, name := range []string{"openapi.yaml", "som/envelope.json", "som/story-context.json", "som/story-event.json", "som/asset-reference.json"} {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := fs.ReadFile(docs.Files(), name)
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the embedded one", name)
		}
	}

	if code := Execute(context.Background(), []string{"openapi", "extra"}, nil, &out, &errb); code != ExitUsage {
		t.Fatalf("an argument: exit %d, want %d", code, ExitUsage)
	}
}
