package som_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

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
