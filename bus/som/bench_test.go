package som_test

import (
	"testing"

	"github.com/storybus/storybus/bus/som"
)

func BenchmarkParse(b *testing.B) {
	body := typicalStory()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := som.Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	body := typicalStory()
	m := parse(b, body)
	if refusals, _ := som.Validate(m); len(refusals) != 0 {
		b.Fatalf("typical story refused: %+v", refusals)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		som.Validate(m)
	}
}

func BenchmarkContentHash(b *testing.B) {
	body := typicalStory()
	m := parse(b, body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.ContentHash(); err != nil {
			b.Fatal(err)
		}
	}
}
