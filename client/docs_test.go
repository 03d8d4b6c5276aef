package client_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsShowTheTestedExamples fails when a Go block of the producer and
// consumer documentation is not, line for line, code of the examples that
// go test runs, or the output shown is not the output the examples check.
func TestDocsShowTheTestedExamples(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	examples := normalise(string(src))
	block := regexp.MustCompile("(?s)```go\n(.*?)```")
	// The output of a Go block, not of the other languages' blocks.
	output := regexp.MustCompile(goOutput)
	for _, doc := range []string{"../docs/producers.md", "../docs/consumers.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		blocks := block.FindAllStringSubmatch(string(b), -1)
		if len(blocks) == 0 {
			t.Fatalf("%s has no Go example", doc)
		}
		for _, m := range blocks {
			if !strings.Contains(examples, normalise(m[1])) {
				t.Errorf("%s: this block is not in example_test.go:\n%s", doc, m[1])
			}
		}
		outputs := output.FindAllStringSubmatch(string(b), -1)
		if len(outputs) != len(blocks) {
			t.Errorf("%s: %d Go blocks, %d outputs", doc, len(blocks), len(outputs))
		}
		for _, m := range outputs {
			var want []string
			for l := range strings.Lines(m[1]) {
				want = append(want, "// "+strings.TrimSpace(l))
			}
			if !strings.Contains(examples, "// Output:\n"+strings.Join(want, "\n")) {
				t.Errorf("%s: this output is not an example's checked output:\n%s", doc, m[1])
			}
		}
	}
}

// goOutput matches a Go block followed by what it prints; the group is
// the output.
const goOutput = "(?s)```go\n(?:[^`]|`[^`]|``[^`])*```\n\nIt prints:\n\n```\n(.*?)```"

// normalise drops indentation and blank lines.
func normalise(s string) string {
	var out []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
