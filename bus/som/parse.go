package som

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is the deepest nesting of objects and arrays Parse accepts; the
// top-level object is depth 1.
const MaxDepth = 64

// ParseError is why Parse refused a body. The HTTP layer answers it as
// message.not_json.
type ParseError struct {
	// Msg says what is wrong, for people.
	Msg string
	// Offset is the byte offset in the body where the problem was found.
	Offset int
	// Path is a JSON Pointer to the value being read when the problem was
	// found, such as the duplicated member; empty for the whole body.
	Path string
}

// Error returns the message with its byte offset.
func (e *ParseError) Error() string {
	return e.Msg + " (at byte " + strconv.Itoa(e.Offset) + ")"
}

// Parse reads one SOM message strictly. It refuses, with a *ParseError, an
// empty body, anything that is not one RFC 8259 JSON value, invalid UTF-8, an
// escaped lone surrogate, a top-level value that is not an object, data after
// the object other than whitespace, a duplicate member name in any object,
// nesting deeper than MaxDepth, and a number that an IEEE 754 double cannot
// hold (too large, or non-zero but too small to be told from zero). Whatever
// it accepts, RFC 8785 can canonicalise, so ContentHash cannot fail on it.
//
// Numbers are decoded as json.Number, keeping the producer's text. The typed
// fields of the Message are filled best-effort (see Message). Parse keeps
// body as Message.Raw, and the strings of Message.Doc share its memory:
// the caller must not change body after Parse.
func Parse(body []byte) (*Message, error) {
	p := parser{data: body, src: unsafe.String(unsafe.SliceData(body), len(body)), path: make([]frame, 0, 8)}
	p.skipSpace()
	if p.pos == len(p.data) {
		return nil, &ParseError{Msg: "the body is empty: send one JSON object"}
	}
	if p.data[p.pos] != '{' {
		start := p.pos
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		return nil, &ParseError{Msg: "the message must be a JSON object, not " + jsonKind(v), Offset: start}
	}
	doc, err := p.object()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, p.fail("unexpected data after the JSON object")
	}
	m := &Message{Raw: body, Doc: doc}
	m.fill()
	return m, nil
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

// fill sets the typed fields from Doc, best-effort. Each is detached from
// the body (see own), since callers keep them longer than the message.
func (m *Message) fill() {
	m.MessageID = own(m.Doc["message_id"])
	m.MessageType = own(m.Doc["message_type"])
	m.SystemID = own(m.Doc["system_id"])
	m.Family, _ = FamilyOf(m.MessageType)
	payload, _ := m.Doc["payload"].(map[string]any)
	switch m.Family {
	case FamilyStoryContext:
		m.StoryID = own(payload["story_id"])
		m.State = own(payload["state"])
		if n, ok := payload["sequence_number"].(json.Number); ok {
			m.SequenceNumber = integer(n)
		}
	case FamilyStoryEvent:
		m.StoryID = own(payload["story_id"])
	}
}

// own returns v when it is a string, "" otherwise, in memory of its own.
// The strings of Doc are slices of the body (see parser.src); a
// typed field kept in a cache after the message is gone, as a story id is,
// must not keep the whole body alive with it. The values SOM defines are
// shared already and need no copy.
func own(v any) string {
	s, _ := v.(string)
	if known, ok := knownValues[s]; ok {
		return known.(string)
	}
	return strings.Clone(s)
}

// integer returns n as an int64 when it is an integral value that fits, such
// as 7 or 7.0 or 7e0, and 0 otherwise.
func integer(n json.Number) int64 {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0
	}
	return int64(f)
}

// parser is a recursive-descent RFC 8259 parser. Recursion is bounded by
// MaxDepth, and every index is checked, so no input can make it panic.
type parser struct {
	data []byte
	// src is data as a string, without a copy (Parse's caller keeps data
	// unchanged): a string without escapes is a slice of it rather than an
	// allocation of its own, and so is the text of a number. It keeps the
	// body alive as long as any string of Doc is.
	src   string
	pos   int
	depth int
	// path is the chain of containers being read, for error paths only.
	path []frame
}

// frame is one open container: the member or element being read in it.
type frame struct {
	key   string
	index int
	// at is 0 before the first member or element, 1 for a member key, 2
	// for an array index.
	at uint8
}

func (p *parser) fail(msg string) *ParseError {
	return &ParseError{Msg: msg, Offset: p.pos, Path: p.pointer()}
}

// failChar reports the unexpected byte at pos, or the end of the body.
func (p *parser) failChar(prefix string) *ParseError {
	if p.pos >= len(p.data) {
		return p.fail(prefix + "unexpected end of the body")
	}
	c := p.data[p.pos]
	if c < 0x20 || c >= 0x7f {
		return p.fail(prefix + "unexpected byte 0x" + strconv.FormatUint(uint64(c), 16))
	}
	return p.fail(prefix + "unexpected character '" + string(rune(c)) + "'")
}

// pointer renders the current path as an RFC 6901 JSON Pointer.
func (p *parser) pointer() string {
	var b strings.Builder
	for _, f := range p.path {
		switch f.at {
		case 1:
			b.WriteByte('/')
			b.WriteString(escapePointer(f.key))
		case 2:
			b.WriteByte('/')
			b.WriteString(strconv.Itoa(f.index))
		}
	}
	return b.String()
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value reads any JSON value; pos is at its first byte, after whitespace.
func (p *parser) value() (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.failChar("not JSON: ")
	}
	switch c := p.data[p.pos]; c {
	case '{':
		return p.object()
	case '[':
		return p.array()
	case '"':
		if v, ok := p.known(); ok {
			return v, nil
		}
		return p.string()
	case 't':
		return true, p.literal("true")
	case 'f':
		return false, p.literal("false")
	case 'n':
		return nil, p.literal("null")
	default:
		if c == '-' || ('0' <= c && c <= '9') {
			return p.number()
		}
		return nil, p.failChar("not JSON: ")
	}
}

func (p *parser) literal(lit string) error {
	if len(p.data)-p.pos < len(lit) || string(p.data[p.pos:p.pos+len(lit)]) != lit {
		return p.failChar("not JSON: ")
	}
	p.pos += len(lit)
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.fail("nesting is deeper than " + strconv.Itoa(MaxDepth) + " levels")
	}
	p.pos++ // '{' or '['
	p.path = append(p.path, frame{})
	return nil
}

func (p *parser) leave() {
	p.depth--
	p.pos++ // '}' or ']'
	p.path = p.path[:len(p.path)-1]
}

// object reads an object; pos is at '{'.
func (p *parser) object() (map[string]any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	obj := make(map[string]any)
	top := len(p.path) - 1
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.leave()
		return obj, nil
	}
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.failChar("not JSON: expected a member name: ")
		}
		keyAt := p.pos
		key, err := p.string()
		if err != nil {
			return nil, err
		}
		p.path[top] = frame{key: key, at: 1}
		if _, dup := obj[key]; dup {
			p.pos = keyAt
			return nil, p.fail("duplicate member name '" + abbreviate(key) + "'")
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.failChar("not JSON: expected ':' after a member name: ")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		obj[key] = v
		p.skipSpace()
		if p.pos < len(p.data) {
			switch p.data[p.pos] {
			case ',':
				p.pos++
				p.path[top] = frame{}
				p.skipSpace()
				continue
			case '}':
				p.leave()
				return obj, nil
			}
		}
		return nil, p.failChar("not JSON: expected ',' or '}' in an object: ")
	}
}

// array reads an array; pos is at '['.
func (p *parser) array() ([]any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	top := len(p.path) - 1
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.leave()
		return []any{}, nil
	}
	arr := make([]any, 0, 4) // most arrays in a message are short lists
	for {
		p.path[top] = frame{index: len(arr), at: 2}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		p.skipSpace()
		if p.pos < len(p.data) {
			switch p.data[p.pos] {
			case ',':
				p.pos++
				p.skipSpace()
				continue
			case ']':
				p.leave()
				return arr, nil
			}
		}
		return nil, p.failChar("not JSON: expected ',' or ']' in an array: ")
	}
}

// knownValues are the string values SOM 1.0 defines (the const and enum
// values of its schemas), each already held in an interface: Parse shares
// them instead of allocating the string and its interface every time.
var knownValues = func() map[string]any {
	m := map[string]any{}
	for _, v := range []string{
		"1.0", TypeStoryContext, TypeStoryEvent, TypeAssetReference,
		"draft", "ready", "published", "updated", "unpublished", "killed",
		"image", "video", "audio", "graphic", "document",
		"corrected", "embargo_lifted",
	} {
		m[v] = v
	}
	return m
}()

// known returns a known value when the string at pos, its opening quote,
// is one, with pos moved past it.
func (p *parser) known() (any, bool) {
	start := p.pos + 1
	for i := start; i < len(p.data) && i-start <= 16; i++ {
		if c := p.data[i]; c == '"' {
			v, ok := knownValues[string(p.data[start:i])]
			if ok {
				p.pos = i + 1
			}
			return v, ok
		} else if c == '\\' {
			return nil, false
		}
	}
	return nil, false
}

// string reads a string; pos is at its opening quote.
func (p *parser) string() (string, error) {
	start := p.pos + 1
	i := start
	// Fast path: a string without escapes, the common case, is a slice of
	// src. Anything else, an escape or a byte to refuse, is left to the loop
	// below from where it stands.
	for i < len(p.data) {
		c := p.data[i]
		if c == '"' {
			p.pos = i + 1
			return p.src[start:i], nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(p.data[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		i += size
	}
	// The unescaped text is never longer than the raw text up to the
	// closing quote, and a Builder's String does not copy: it costs one
	// allocation.
	end := i
	for end < len(p.data) && p.data[end] != '"' {
		if p.data[end] == '\\' {
			end++
		}
		end++
	}
	var buf strings.Builder
	buf.Grow(min(end, len(p.data)) - start)
	buf.Write(p.data[start:i])
	for i < len(p.data) {
		c := p.data[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return buf.String(), nil
		case c == '\\':
			if i+1 >= len(p.data) {
				p.pos = i
				return "", p.fail("not JSON: unterminated string")
			}
			switch e := p.data[i+1]; e {
			case '"', '\\', '/':
				buf.WriteByte(e)
			case 'b':
				buf.WriteByte('\b')
			case 'f':
				buf.WriteByte('\f')
			case 'n':
				buf.WriteByte('\n')
			case 'r':
				buf.WriteByte('\r')
			case 't':
				buf.WriteByte('\t')
			case 'u':
				r, n, msg := unicodeEscape(p.data[i:])
				if msg != "" {
					p.pos = i
					return "", p.fail(msg)
				}
				buf.WriteRune(r)
				i += n
				continue
			default:
				p.pos = i
				return "", p.fail("not JSON: invalid escape '\\" + printable(e) + "' in a string")
			}
			i += 2
		case c < 0x20:
			p.pos = i
			return "", p.fail("not JSON: unescaped control character in a string")
		case c < utf8.RuneSelf:
			buf.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRune(p.data[i:])
			if r == utf8.RuneError && size <= 1 {
				p.pos = i
				return "", p.fail("not UTF-8: invalid byte sequence in a string")
			}
			buf.Write(p.data[i : i+size])
			i += size
		}
	}
	p.pos = i
	return "", p.fail("not JSON: unterminated string")
}

// unicodeEscape decodes a \uXXXX escape, or a surrogate pair of two, at the
// start of b. It returns the rune, the bytes consumed, and a message when the
// escape is malformed or a lone surrogate, which RFC 8785 cannot represent.
func unicodeEscape(b []byte) (rune, int, string) {
	r1, ok := hex4(b)
	if !ok {
		return 0, 0, "not JSON: invalid \\u escape in a string"
	}
	if !utf16.IsSurrogate(r1) {
		return r1, 6, ""
	}
	if r1 >= 0xdc00 {
		return 0, 0, "not UTF-8: lone low surrogate \\u" + string(b[2:6]) + " in a string"
	}
	if len(b) < 8 || b[6] != '\\' || b[7] != 'u' {
		return 0, 0, "not UTF-8: lone high surrogate \\u" + string(b[2:6]) + " in a string"
	}
	r2, ok := hex4(b[6:])
	if !ok {
		return 0, 0, "not JSON: invalid \\u escape in a string"
	}
	if r2 < 0xdc00 || r2 > 0xdfff {
		return 0, 0, "not UTF-8: lone high surrogate \\u" + string(b[2:6]) + " in a string"
	}
	return utf16.DecodeRune(r1, r2), 12, ""
}

// hex4 decodes the four hex digits of a \u escape at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 6 {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func printable(c byte) string {
	if c < 0x20 || c >= 0x7f {
		return "\\x" + strconv.FormatUint(uint64(c), 16)
	}
	return string(rune(c))
}

// number reads a number; pos is at '-' or a digit.
func (p *parser) number() (json.Number, error) {
	start := p.pos
	i := start
	d := p.data
	if d[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		digits()
	default:
		p.pos = i
		return "", p.failChar("not JSON: invalid number: ")
	}
	simple := true
	if i < len(d) && d[i] == '.' {
		simple = false
		i++
		if digits() == 0 {
			p.pos = i
			return "", p.failChar("not JSON: invalid number: ")
		}
	}
	mantissaEnd := i
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		simple = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if digits() == 0 {
			p.pos = i
			return "", p.failChar("not JSON: invalid number: ")
		}
	}
	text := p.src[start:i]
	// An integer of up to 15 digits is always an exact double; anything
	// else is checked against the double range as RFC 8785 requires.
	if !simple || i-start > 15 {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			p.pos = start
			return "", p.fail("number " + abbreviate(text) + " is outside the range of an IEEE 754 double")
		}
		if f == 0 && nonZeroDigit(d[start:mantissaEnd]) {
			p.pos = start
			return "", p.fail("number " + abbreviate(text) + " is too small for an IEEE 754 double: it would round to 0")
		}
	}
	p.pos = i
	return json.Number(text), nil
}

func nonZeroDigit(b []byte) bool {
	for _, c := range b {
		if '1' <= c && c <= '9' {
			return true
		}
	}
	return false
}

// abbreviate bounds a producer's text quoted in an error message, cutting
// at a rune boundary.
func abbreviate(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	cut := max - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// escapePointer escapes one JSON Pointer reference token (RFC 6901).
func escapePointer(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
}
