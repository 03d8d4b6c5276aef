package som_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/storybus/storybus/bus/som"
)

func hash(t *testing.T, body string) [32]byte {
	t.Helper()
	h, err := parse(t, []byte(body)).ContentHash()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestContentHash(t *testing.T) {
	const base = `{"som_version":"1.0","message_id":"0b7f3c1e-8d2a-4c5e-9f1a-2b3c4d5e6f70","message_type":"story.context","system_id":"cms-main","timestamp":"2024-05-01T12:00:00Z","payload":{"story_id":"s-1","sequence_number":1,"state":"draft","headline":"Caf\u00e9 opens","labels":["a","b"]}}`
	h := hash(t, base)

	for name, same := range map[string]string{
		"reordered members": `{"payload":{"labels":["a","b"],"headline":"Café opens","state":"draft","sequence_number":1,"story_id":"s-1"},"timestamp":"2024-05-01T12:00:00Z","system_id":"cms-main","message_type":"story.context","message_id":"0b7f3c1e-8d2a-4c5e-9f1a-2b3c4d5e6f70","som_version":"1.0"}`,
		"whitespace":        " \n" + indent(base) + "\r\n",
		"escapes":           strings.Replace(base, `"story_id"`, `"story\u005fid"`, 1),
		"number form":       strings.Replace(base, `"sequence_number":1`, `"sequence_number":1.0e0`, 1),
	} {
		if got := hash(t, same); got != h {
			t.Errorf("%s: hash changed", name)
		}
	}

	for name, other := range map[string]string{
		"timestamp":     strings.Replace(base, "12:00:00Z", "12:00:01Z", 1),
		"headline":      strings.Replace(base, "opens", "closes", 1),
		"number":        strings.Replace(base, `"sequence_number":1`, `"sequence_number":2`, 1),
		"array order":   strings.Replace(base, `["a","b"]`, `["b","a"]`, 1),
		"string vs num": strings.Replace(base, `"sequence_number":1`, `"sequence_number":"1"`, 1),
		"extra member":  strings.Replace(base, `"labels"`, `"desk":"city","labels"`, 1),
	} {
		if got := hash(t, other); got == h {
			t.Errorf("%s: hash did not change", name)
		}
	}
}

func indent(s string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "\t", "   "); err != nil {
		panic(err)
	}
	return b.String()
}

func TestContentHashEmpty(t *testing.T) {
	var m *som.Message
	if _, err := m.ContentHash(); err == nil {
		t.Error("nil message: want an error")
	}
	if _, err := (&som.Message{}).ContentHash(); err == nil {
		t.Error("empty message: want an error")
	}
}

// jcsHash is the reference ContentHash: SHA-256 of what the jcs package
// makes of the body.
func jcsHash(t testing.TB, body []byte) [32]byte {
	t.Helper()
	canonical, err := jcs.Transform(body)
	if err != nil {
		t.Fatalf("jcs refuses %q: %v", body, err)
	}
	return sha256.Sum256(canonical)
}

// TestContentHashMatchesJCS checks the canonical form written from Doc
// against the jcs package run on the body. Where canonical is set, it also
// pins the expected form, so a case cannot pass by both being wrong.
func TestContentHashMatchesJCS(t *testing.T) {
	for _, tc := range []struct {
		name, body, canonical string
	}{
		{name: "typical story", body: string(typicalStory())},
		{name: "key order", body: `{"b":1,"a":2,"c":{"z":1,"y":[3,{"k":2,"j":1}]},"aa":0,"A":0,"":0}`,
			canonical: `{"":0,"A":0,"a":2,"aa":0,"b":1,"c":{"y":[3,{"j":1,"k":2}],"z":1}}`},
		{name: "empty containers", body: `{"a":[],"b":{},"c":[[],[{}],{"d":[]}]}`,
			canonical: `{"a":[],"b":{},"c":[[],[{}],{"d":[]}]}`},
		{name: "literals", body: ` { "t" : true , "f" : false , "n" : null , "a" : [ true , false , null ] } `,
			canonical: `{"a":[true,false,null],"f":false,"n":null,"t":true}`},
		{name: "deep nesting", body: nested(som.MaxDepth)},
		// RFC 8785 §3.2.3's own example.
		{name: "RFC 8785 sorting", body: `{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			canonical: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001f600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		// Above U+FFFF sorts before U+E000..U+FFFF in UTF-16, after it in UTF-8.
		{name: "astral before U+E000", body: `{"\ue000":1,"\ud800\udc00":2}`,
			canonical: "{\"\U00010000\":2,\"\ue000\":1}"},
		{name: "astral before U+FFFF", body: "{\"\uffff\":1,\"\U0010ffff\":2,\"\ufffd\":3,\"\U0001f600\":4}",
			canonical: "{\"\U0001f600\":4,\"\U0010ffff\":2,\"\ufffd\":3,\"\uffff\":1}"},
		{name: "astral after U+D7FF", body: `{"\ud83d\ude00":1,"\ud7ff":2,"\u0800":3,"\u07ff":4}`,
			canonical: "{\"\u07ff\":4,\"\u0800\":3,\"\ud7ff\":2,\"\U0001f600\":1}"},
		{name: "astral inside a name", body: `{"a\ue000b":1,"a\ud83d\ude00":2,"a":3,"a\ufffd\ufffd":4,"a\udbff\udfff":5}`,
			canonical: "{\"a\":3,\"a\U0001f600\":2,\"a\U0010ffff\":5,\"a\ue000b\":1,\"a\ufffd\ufffd\":4}"},
		{name: "astral pairs", body: `{"\ud83d\ude01":1,"\ud83d\ude00":2,"\ud83c\udfff":3,"\ud800\udc01":4}`},
		{name: "escaped names", body: `{"a\"b":1,"a\\b":2,"a\nb":3,"a\u0000b":4,"a/b":5,"a\/c":6}`,
			canonical: `{"a\u0000b":4,"a\nb":3,"a\"b":1,"a/b":5,"a/c":6,"a\\b":2}`},
		{name: "short escapes", body: `{"s":"quote \" backslash \\ solidus \/ / b\b f\f n\n r\r t\t"}`,
			canonical: `{"s":"quote \" backslash \\ solidus / / b\b f\f n\n r\r t\t"}`},
		{name: "control characters", body: `{"s":"` + controls() + `"}`,
			canonical: `{"s":"\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f ` + "\x7f" + `"}`},
		{name: "upper-case hex escapes", body: `{"s":"\u001F\u00E9\u00e9"}`,
			canonical: "{\"s\":\"\\u001f\u00e9\u00e9\"}"},
		{name: "line separators", body: "{\"s\":\"\\u2028\\u2029 \u2028\u2029\",\"\u2028\":1}",
			canonical: "{\"s\":\"\u2028\u2029 \u2028\u2029\",\"\u2028\":1}"},
		{name: "non-ASCII literal and escaped", body: `{"s":"caf\u00e9 café \ufeff \ufffd \ud83d\ude00 😀 \u0800"}`},
		{name: "integers", body: `{"a":[0,-0,1,-1,100,1E2,1e+2,123456789012345,9007199254740992,9007199254740993,-9007199254740993,18446744073709551616]}`,
			canonical: `{"a":[0,0,1,-1,100,100,100,123456789012345,9007199254740992,9007199254740992,-9007199254740992,18446744073709552000]}`},
		{name: "fractions", body: `{"a":[1.0,1.5,0.1,0.30000000000000004,-0.0,333333333.33333329,0.000001,1e-6,1e-7,-1e-7,0.0000001234,1.00000000000000011102230246251565404236316680908203125]}`,
			canonical: `{"a":[1,1.5,0.1,0.30000000000000004,0,333333333.3333333,0.000001,0.000001,1e-7,-1e-7,1.234e-7,1]}`},
		{name: "exponents", body: `{"a":[1e20,1e21,1e+21,1E21,-1e21,1e23,123456789012345678901234567890,1.7976931348623157e308,-1.7976931348623157e308,5e-324,4.9e-324,2.2250738585072014e-308,1e308,1e-300,0e999,-0e-999]}`,
			canonical: `{"a":[100000000000000000000,1e+21,1e+21,1e+21,-1e+21,1e+23,1.2345678901234568e+29,1.7976931348623157e+308,-1.7976931348623157e+308,5e-324,5e-324,2.2250738585072014e-308,1e+308,1e-300,0,0]}`},
		{name: "numbers as names and strings", body: `{"1e3":"1e3","10":10,"9":9}`,
			canonical: `{"10":10,"1e3":"1e3","9":9}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			want := jcsHash(t, body)
			if tc.canonical != "" {
				if got, _ := jcs.Transform(body); string(got) != tc.canonical {
					t.Fatalf("the case is wrong: jcs gives\n%s\nnot\n%s", got, tc.canonical)
				}
			}
			if got := hash(t, tc.body); got != want {
				t.Errorf("ContentHash differs from SHA-256 of the jcs form of %s", tc.body)
			}
		})
	}
}

// controls is every ASCII control character, in the ways a producer may
// write them, and DEL, which is not one in JSON.
func controls() string {
	var b strings.Builder
	for c := range 0x20 {
		switch c {
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			b.WriteString(`\u00` + strconv.FormatUint(uint64(c)>>4, 16) + strings.ToUpper(strconv.FormatUint(uint64(c)&0xf, 16)))
		}
	}
	b.WriteString(" \x7f")
	return b.String()
}

// TestContentHashSpellings checks that spellings RFC 8785 treats alike hash
// alike.
func TestContentHashSpellings(t *testing.T) {
	for _, group := range [][]string{
		{`{"s":"\u00e9"}`, `{"s":"é"}`, `{"s":"\u00E9"}`},
		{`{"\u00e9":1}`, `{"é":1}`},
		{`{"s":"\ud83d\ude00"}`, `{"s":"😀"}`, `{"s":"\uD83D\uDE00"}`},
		{`{"s":"/"}`, `{"s":"\/"}`},
		{`{"s":"\u000a"}`, `{"s":"\n"}`},
		{`{"n":1}`, `{"n":1.0}`, `{"n":1e0}`, `{"n":10e-1}`, `{"n":0.1e1}`},
		{`{"n":0}`, `{"n":-0}`, `{"n":0.0}`, `{"n":-0e5}`},
		{`{"n":1e21}`, `{"n":1000000000000000000000}`, `{"n":1E+21}`},
		{`{"a":1,"b":[2,{"c":3,"d":4}]}`, `{"b":[2,{"d":4,"c":3}],"a":1}`, "{\n\t\"b\" : [ 2 , { \"d\":4 , \"c\":3 } ] ,\r\n \"a\":1 }"},
	} {
		want := hash(t, group[0])
		for _, body := range group[1:] {
			if got := hash(t, body); got != want {
				t.Errorf("%s and %s hash differently", group[0], body)
			}
		}
	}
}

// TestContentHashRandomNames checks member ordering against the jcs package
// on objects whose names mix the characters where UTF-16 and UTF-8 orders
// part.
func TestContentHashRandomNames(t *testing.T) {
	alphabet := []rune{'a', 'b', 0x7f, 0x80, 0xe9, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xefff, 0xf000, 0xfffd, 0xffff,
		0x10000, 0x103ff, 0x10400, 0x1f600, 0xfffff, 0x100000, 0x10ffff}
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		doc := map[string]any{}
		for range 1 + r.IntN(12) {
			name := make([]rune, r.IntN(4))
			for i := range name {
				name[i] = alphabet[r.IntN(len(alphabet))]
			}
			doc[string(name)] = r.IntN(100)
		}
		body, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := hash(t, string(body)), jcsHash(t, body); got != want {
			t.Fatalf("ContentHash differs from SHA-256 of the jcs form of %s", body)
		}
	}
}

// TestContentHashUnexpectedDoc checks that a Doc Parse would never produce
// is refused with an error, not hashed or panicked on.
func TestContentHashUnexpectedDoc(t *testing.T) {
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	deep := map[string]any{}
	for range som.MaxDepth {
		deep = map[string]any{"a": deep}
	}
	for name, doc := range map[string]map[string]any{
		"float64":           {"n": 1.5},
		"int":               {"n": 1},
		"typed slice":       {"a": []string{"x"}},
		"hex number":        {"n": json.Number("0x10")},
		"signed number":     {"n": json.Number("+1")},
		"leading zero":      {"n": json.Number("01")},
		"bare point":        {"n": json.Number(".5")},
		"NaN":               {"n": json.Number("NaN")},
		"infinity":          {"n": json.Number("Infinity")},
		"out of range":      {"n": json.Number("1e400")},
		"empty number":      {"n": json.Number("")},
		"invalid UTF-8":     {"s": "\xff"},
		"invalid UTF-8 key": {"\xff": 1},
		"nested bad value":  {"a": []any{map[string]any{"b": 2.5}}},
		"cyclic":            cyclic,
		"too deep":          deep,
	} {
		if _, err := (&som.Message{Doc: doc}).ContentHash(); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	// The canonicalizer is pooled: a failure must leave nothing behind that
	// changes the next hash.
	if got, want := hash(t, `{"a":{"b":1}}`), jcsHash(t, []byte(`{"a":{"b":1}}`)); got != want {
		t.Error("hash after a failure differs from the jcs form")
	}
}
