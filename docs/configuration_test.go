package docs_test

import (
	"os"
	"strings"
	"testing"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

// TestConfigurationShowsTheSampleFile fails when "The sample file" of
// configuration.md is not, byte for byte, the file `storybus dev` serves,
// or when that file is not a sandbox: publish-api.md and producers.md say
// the sample workspace answers the Storybus-Sandbox-Answer header, so a
// copy of the page's sample given to `storybus dev --config` must too.
func TestConfigurationShowsTheSampleFile(t *testing.T) {
	page, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(page), "\n## The sample file\n")
	if !found {
		t.Fatal("configuration.md has no section The sample file")
	}
	_, block, found := strings.Cut(section, "```yaml\n")
	if !found {
		t.Fatal("the section shows no yaml block")
	}
	block, _, _ = strings.Cut(block, "```")
	file, err := os.ReadFile("../config/dev/workspace-newsroom.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if block != string(file) {
		t.Fatalf("the page's sample differs from config/dev/workspace-newsroom.yaml:\n%s", block)
	}
	w, err := config.Parse([]byte(block))
	if err != nil {
		t.Fatal(err)
	}
	if !w.Sandbox {
		t.Fatal("the sample workspace is not a sandbox, yet the pages say storybus dev's is")
	}
	api, err := os.ReadFile("publish-api.md")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(api), "always on for `storybus dev`") {
		t.Fatal("publish-api.md says the sandbox is always on for storybus dev: with --config, the file decides")
	}
}
