package som

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// ContentHash returns the SHA-256 of the message's RFC 8785 (JCS) canonical
// form, the content the idempotency record compares. Member order and
// whitespace do not change it; any changed value does, the timestamp
// included. Numbers are compared as IEEE 754 doubles, as RFC 8785 defines,
// so 1.0 and 1 hash alike. It cannot fail for a Message from Parse.
//
// The canonical form is written from Doc rather than by parsing Raw again,
// which would cost most of the publish path; the two agree for any Message
// from Parse. A Doc built by hand must hold only what Parse produces.
func (m *Message) ContentHash() ([32]byte, error) {
	if m == nil || m.Doc == nil {
		return [32]byte{}, errors.New("som: content hash of an empty message")
	}
	c := canonicalPool.Get().(*canonicalizer)
	defer c.release()
	if err := c.object(m.Doc, 1); err != nil {
		return [32]byte{}, fmt.Errorf("som: canonical JSON: %w", err)
	}
	return sha256.Sum256(c.buf), nil
}

// canonicalizer writes the RFC 8785 form of a decoded document into buf.
// members is a stack: each object sorts its own members on top of its
// parents' and pops them when done, so nesting costs no allocation, and
// each value is taken from the map once, while iterating it, rather than
// looked up again by name after sorting.
type canonicalizer struct {
	buf     []byte
	members []member
}

// member is one name and value of an object being written.
type member struct {
	name  string
	value any
}

// compareMembers orders members by name as RFC 8785 §3.2.3 requires.
func compareMembers(a, b member) int { return compareUTF16(a.name, b.name) }

// maxPooledBuffer bounds the buffer a canonicalizer keeps between uses, so
// that one outsized message does not pin its memory in the pool.
const maxPooledBuffer = 64 << 10

var canonicalPool = sync.Pool{New: func() any {
	return &canonicalizer{buf: make([]byte, 0, 4<<10), members: make([]member, 0, 64)}
}}

func (c *canonicalizer) release() {
	if cap(c.buf) > maxPooledBuffer {
		return
	}
	c.buf = c.buf[:0]
	// A failed object leaves its members on the stack; drop them so the
	// pool holds no references into the message.
	clear(c.members)
	c.members = c.members[:0]
	canonicalPool.Put(c)
}

// value writes one value. depth bounds the recursion, so that a cyclic
// Doc built by hand fails instead of exhausting the stack.
func (c *canonicalizer) value(v any, depth int) error {
	switch v := v.(type) {
	case map[string]any:
		return c.object(v, depth+1)
	case []any:
		return c.array(v, depth+1)
	case string:
		return c.string(v)
	case json.Number:
		return c.number(v)
	case bool:
		if v {
			c.buf = append(c.buf, "true"...)
		} else {
			c.buf = append(c.buf, "false"...)
		}
	case nil:
		c.buf = append(c.buf, "null"...)
	default:
		return fmt.Errorf("unexpected %T in the document", v)
	}
	return nil
}

// object writes members sorted by their names as UTF-16 code units
// (RFC 8785 §3.2.3).
func (c *canonicalizer) object(obj map[string]any, depth int) error {
	if depth > MaxDepth {
		return errors.New("nesting is deeper than " + strconv.Itoa(MaxDepth) + " levels")
	}
	base := len(c.members)
	for k, v := range obj {
		c.members = append(c.members, member{k, v})
	}
	slices.SortFunc(c.members[base:], compareMembers)
	c.buf = append(c.buf, '{')
	// Nested objects push onto c.members and may move it, so index it
	// afresh.
	for i := base; i < base+len(obj); i++ {
		if i > base {
			c.buf = append(c.buf, ',')
		}
		m := c.members[i]
		if err := c.string(m.name); err != nil {
			return err
		}
		c.buf = append(c.buf, ':')
		if err := c.value(m.value, depth); err != nil {
			return err
		}
	}
	c.buf = append(c.buf, '}')
	clear(c.members[base:])
	c.members = c.members[:base]
	return nil
}

func (c *canonicalizer) array(arr []any, depth int) error {
	if depth > MaxDepth {
		return errors.New("nesting is deeper than " + strconv.Itoa(MaxDepth) + " levels")
	}
	c.buf = append(c.buf, '[')
	for i, v := range arr {
		if i > 0 {
			c.buf = append(c.buf, ',')
		}
		if err := c.value(v, depth); err != nil {
			return err
		}
	}
	c.buf = append(c.buf, ']')
	return nil
}

// string writes s as RFC 8785 §3.2.2.2 requires, which is what ECMAScript's
// JSON.stringify does: the two-character escapes for '"', '\\', and \b \f
// \n \r \t, \u00xx in lower-case hex for the other control characters, and
// every other character as itself in UTF-8, U+2028, U+2029 and '/' included.
func (c *canonicalizer) string(s string) error {
	const hex = "0123456789abcdef"
	c.buf = append(c.buf, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) && plainASCII8(s[i:i+8]) {
			i += 8
			continue
		}
		ch := s[i]
		if ch >= utf8.RuneSelf {
			// Literal, once known to be UTF-8, which JCS requires.
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return errors.New("a string is not valid UTF-8")
			}
			i += size
			continue
		}
		if !escaped[ch] {
			i++
			continue
		}
		c.buf = append(c.buf, s[start:i]...)
		switch ch {
		case '"', '\\':
			c.buf = append(c.buf, '\\', ch)
		case '\b':
			c.buf = append(c.buf, '\\', 'b')
		case '\f':
			c.buf = append(c.buf, '\\', 'f')
		case '\n':
			c.buf = append(c.buf, '\\', 'n')
		case '\r':
			c.buf = append(c.buf, '\\', 'r')
		case '\t':
			c.buf = append(c.buf, '\\', 't')
		default:
			c.buf = append(c.buf, '\\', 'u', '0', '0', hex[ch>>4], hex[ch&0xf])
		}
		i++
		start = i
	}
	c.buf = append(c.buf, s[start:]...)
	c.buf = append(c.buf, '"')
	return nil
}

// plainASCII8 reports whether the 8 bytes of s are all printable ASCII
// other than '"' and '\\', so that string can pass over them at once: most
// of a message's text is such bytes. It reads them as one 64-bit word and
// uses the bit tricks of "Determine if a word has a byte less than n"
// (Bit Twiddling Hacks): w-n*ones borrows into a byte's top bit only when
// that byte is below n, once no byte has its top bit set.
func plainASCII8(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	if w&highs != 0 {
		return false // a byte of a multi-byte character
	}
	below := func(w uint64, n uint64) bool { return (w-n*ones)&^w&highs != 0 }
	quote, backslash := w^('"'*ones), w^('\\'*ones) // a zero byte where it matched
	return !below(w, 0x20) && !below(quote, 1) && !below(backslash, 1)
}

// escaped marks the bytes a JSON string cannot hold as themselves: ASCII
// control characters, '"' and '\\'.
var escaped = func() (t [256]bool) {
	for ch := range 0x20 {
		t[ch] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// number writes n as the ECMAScript serialisation of the double it denotes
// (RFC 8785 §3.2.2.3), which the jcs package implements.
func (c *canonicalizer) number(n json.Number) error {
	// strconv.ParseFloat also takes hex, "Inf", underscores and more, which
	// a json.Number from Parse never holds; refuse them rather than hash
	// what JCS would reject.
	if !isJSONNumber(string(n)) {
		return fmt.Errorf("%q is not a JSON number", abbreviate(string(n)))
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return fmt.Errorf("number %s: %w", abbreviate(string(n)), err)
	}
	text, err := jcs.NumberToJSON(f)
	if err != nil {
		return fmt.Errorf("number %s: %w", abbreviate(string(n)), err)
	}
	c.buf = append(c.buf, text...)
	return nil
}

// isJSONNumber reports whether s is an RFC 8259 number:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s string) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// compareUTF16 orders a and b by their UTF-16 code units without encoding
// them. UTF-8 byte order is code point order, and UTF-16 order differs from
// it in one place only: a character above U+FFFF, a surrogate pair starting
// at U+D800, sorts before U+E000..U+FFFF. Where a and b first differ in a
// lead byte, 0xF0..0xF4 starts the former and 0xEE or 0xEF the latter; a
// difference in a continuation byte lies within characters of one length,
// which both orders agree on.
func compareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	x, y := a[i], b[i]
	if x >= 0xee && y >= 0xee && (x >= 0xf0) != (y >= 0xf0) {
		if x >= 0xf0 {
			return -1
		}
		return 1
	}
	return cmp.Compare(x, y)
}
