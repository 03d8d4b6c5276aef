package som

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/gowebpki/jcs"
)

// ContentHash returns the SHA-256 of the message's RFC 8785 (JCS) canonical
// form, the content the idempotency record compares. Member order and
// whitespace do not change it; any changed value does, the timestamp
// included. Numbers are compared as IEEE 754 doubles, as RFC 8785 defines,
// so 1.0 and 1 hash alike. It cannot fail for a Message from Parse.
func (m *Message) ContentHash() ([32]byte, error) {
	if m == nil || m.Raw == nil {
		return [32]byte{}, errors.New("som: content hash of an empty message")
	}
	canonical, err := jcs.Transform(m.Raw)
	if err != nil {
		return [32]byte{}, fmt.Errorf("som: canonical JSON: %w", err)
	}
	return sha256.Sum256(canonical), nil
}
