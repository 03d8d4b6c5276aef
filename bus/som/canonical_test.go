package som

import (
	"math/rand/v2"
	"testing"
)

// TestPlainASCII8 compares the word-at-a-time check with the byte-at-a-time
// one it stands for: every byte value at every position of a plain word,
// every pair of byte values in two positions, and random words.
func TestPlainASCII8(t *testing.T) {
	plain := func(s string) bool {
		for i := range len(s) {
			if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				return false
			}
		}
		return true
	}
	check := func(b []byte) {
		t.Helper()
		if got, want := plainASCII8(string(b)), plain(string(b)); got != want {
			t.Fatalf("plainASCII8(%q) = %v, want %v", b, got, want)
		}
	}
	base := []byte("Council!")
	for pos := range 8 {
		for c := range 256 {
			b := append([]byte(nil), base...)
			b[pos] = byte(c)
			check(b)
		}
	}
	for x := range 256 {
		for y := range 256 {
			b := append([]byte(nil), base...)
			b[2], b[5] = byte(x), byte(y)
			check(b)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		b := make([]byte, 8)
		for i := range b {
			// Mostly printable ASCII, as text is, with the odd other byte.
			if rng.IntN(16) == 0 {
				b[i] = byte(rng.IntN(256))
			} else {
				b[i] = byte(0x20 + rng.IntN(0x60))
			}
		}
		check(b)
	}
}
