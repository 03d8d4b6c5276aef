package som

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// validatorFormat returns the validator's own check for a format, the one
// the full schema validation applies.
func validatorFormat(t testing.TB, name string) func(any) error {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("f.json", map[string]any{"format": name}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("f.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.Format == nil || s.Format.Name != name {
		t.Fatalf("format %s is not known to the validator", name)
	}
	return s.Format.Validate
}

// formatSeeds are spellings each sure check must confirm, the everyday ones.
var formatSeeds = map[string][]string{
	"uuid": {"0b7f3c1e-8d2a-4c5e-9f1a-2b3c4d5e6f70", "F47AC10B-58CC-4372-A567-0E02B2C3D479"},
	"date-time": {
		"2024-05-01T12:00:00Z", "2024-05-01t12:00:00z", "2024-02-29T23:59:59.123456+05:30",
		"2000-02-29T00:00:00-12:00", "1999-12-31T23:59:59.9Z", "0000-02-29T00:00:00Z", "9999-11-30T00:00:00+23:59",
	},
	"uri": {
		"https://cms.example/stories/story-123/revisions/7/body", "http://a", "https://media.example:8443/x?y=1&z=a:b#frag/?",
		"urn+x.y-z://host-1.example/~user/a;b=c,d@e!$'()*", "s3://bucket/key?", "https://h#",
	},
}

// formatMutations returns every seed with each byte replaced by, and each
// position given an insertion of, each byte of alphabet, and every prefix.
func formatMutations(seeds []string, alphabet string) []string {
	var out []string
	for _, s := range seeds {
		for i := 0; i <= len(s); i++ {
			out = append(out, s[:i])
			for _, c := range []byte(alphabet) {
				out = append(out, s[:i]+string(c)+s[i:])
				if i < len(s) {
					out = append(out, s[:i]+string(c)+s[i+1:])
				}
			}
			if i < len(s) {
				out = append(out, s[:i]+s[i+1:])
			}
		}
	}
	return out
}

// TestSureFormatsAgreeWithValidator holds each sure check to its promise:
// whatever it confirms, the validator accepts; and it confirms the
// everyday spellings, or the quick check would gain nothing.
func TestSureFormatsAgreeWithValidator(t *testing.T) {
	const alphabet = "0129aAfFgzZtTx-+.:/?#%@[]_~!$&'()*,;= \"\\\x00\x7f\xc3\xa9\xff"
	rng := rand.New(rand.NewPCG(1, 2))
	for name, sure := range sureFormats {
		t.Run(name, func(t *testing.T) {
			full := validatorFormat(t, name)
			seeds := formatSeeds[name]
			if len(seeds) == 0 {
				t.Fatalf("no seeds for %s", name)
			}
			for _, s := range seeds {
				if !sure(s) {
					t.Errorf("sure %s does not confirm %q", name, s)
				}
			}
			inputs := formatMutations(seeds, alphabet)
			for range 20000 {
				var b strings.Builder
				for range rng.IntN(48) {
					b.WriteByte(alphabet[rng.IntN(len(alphabet))])
				}
				inputs = append(inputs, b.String())
			}
			confirmed := 0
			for _, s := range inputs {
				err := full(s)
				if sure(s) {
					confirmed++
					if err != nil {
						t.Fatalf("sure %s confirms %q, which the validator refuses: %v", name, s, err)
					}
				} else if name == "uuid" && err == nil {
					t.Fatalf("sure uuid does not confirm %q, which the validator accepts", s)
				}
			}
			t.Logf("%s: %d of %d inputs confirmed", name, confirmed, len(inputs))
		})
	}
}

// FuzzSureFormats checks, on arbitrary strings, that every sure check
// confirms only what the validator accepts.
func FuzzSureFormats(f *testing.F) {
	for _, seeds := range formatSeeds {
		for _, s := range seeds {
			f.Add(s)
		}
	}
	full := map[string]func(any) error{}
	for name := range sureFormats {
		full[name] = validatorFormat(f, name)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, sure := range sureFormats {
			if sure(s) {
				if err := full[name](s); err != nil {
					t.Fatalf("sure %s confirms %q, which the validator refuses: %v", name, s, err)
				}
			}
		}
	})
}
