package bus

import (
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzAckSubject feeds the ack route's decoder arbitrary ack ids: it never
// panics, and what it accepts is an acknowledgement subject of the given
// consumer of the workspace's topic, with no wildcard and no empty token.
// fuzzAckKey signs the fuzzed ack ids.
var fuzzAckKey = []byte("0123456789abcdef0123456789abcdef")

func FuzzAckSubject(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.som-newsroom.web.1.2.3.1764406800000000000.0",
		"$JS.ACK.hub.ACCOUNT.som-newsroom.web.1.2.3.1764406800000000000.0.token",
		"$JS.ACK.som-other.web.1.2.3.4.0",
		"$JS.ACK.som-newsroom.web.*.2.3.4.0",
		"$JS.ACK.som-newsroom.web..2.3.4.0",
	} {
		f.Add(signAckID(fuzzAckKey, s))
		f.Add(base64.RawURLEncoding.EncodeToString([]byte(s)))
	}
	f.Add("not base64!")
	f.Fuzz(func(t *testing.T, id string) {
		subj, ok := ackSubject(fuzzAckKey, "newsroom", "web", id)
		if !ok {
			return
		}
		if _, ok := ackSubject([]byte("another workspace's signing key!"), "newsroom", "web", id); ok {
			t.Fatalf("accepted %q under another key", id)
		}
		tokens := strings.Split(subj, ".")
		if !strings.HasPrefix(subj, "$JS.ACK.") || strings.ContainsAny(subj, "*> \t\r\n") || len(tokens) < 9 || len(tokens) > 12 {
			t.Fatalf("accepted %q", subj)
		}
		for _, tok := range tokens {
			if tok == "" {
				t.Fatalf("accepted an empty token in %q", subj)
			}
		}
		if !strings.Contains(subj, ".som-newsroom.web.") {
			t.Fatalf("accepted another consumer's subject %q", subj)
		}
	})
}
