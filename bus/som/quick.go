package som

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// quickSchema is a compiled schema read for the keywords the SOM schemas
// use, so that the common case, a valid message, is confirmed without the
// full validator's bookkeeping (about 170 allocations for a typical
// snapshot). It only ever says "certainly valid"; anything else, including
// every invalid message, goes to the full validator, which alone reports
// violations. A schema node with a keyword it does not know is never
// confirmed.
type quickSchema struct {
	// known is false when the schema has a keyword quick does not apply.
	known bool
	// typ is the one JSON type the schema requires, or "" for none.
	typ      string
	constant *string
	enum     []string
	format   func(any) error
	// sureFormat, when set, confirms the everyday spellings of the format
	// without calling format (see formats.go).
	sureFormat     func(string) bool
	pattern        jsonschema.Regexp
	minLen, maxLen int // -1: none
	min, max       *int64
	maxItems       int // -1: none
	items          *quickSchema
	maxProps       int // -1: none
	required       []string
	props          map[string]*quickSchema
	closed         bool // additionalProperties false
}

// quickKeywords are the fields of a compiled schema quick applies or that
// do not affect validation; a schema with any other field set is unknown.
var quickKeywords = map[string]bool{
	"DraftVersion": true, "Location": true, "ID": true, "Title": true, "Description": true,
	"Default": true, "Comment": true, "Examples": true, "Deprecated": true, "ReadOnly": true, "WriteOnly": true,
	"Types": true, "Const": true, "Enum": true, "Format": true,
	"MinLength": true, "MaxLength": true, "Pattern": true, "Minimum": true, "Maximum": true,
	"MaxItems": true, "Items2020": true,
	"MaxProperties": true, "Required": true, "Properties": true, "AdditionalProperties": true,
}

// quickCompiled holds the quick form of every schema, built once.
var quickCompiled = sync.OnceValue(func() map[string]*quickSchema {
	out := make(map[string]*quickSchema, len(schemaNames))
	for name, s := range compiled() {
		out[name] = newQuick(s)
	}
	return out
})

func newQuick(s *jsonschema.Schema) *quickSchema {
	q := &quickSchema{minLen: -1, maxLen: -1, maxItems: -1, maxProps: -1}
	if s == nil {
		return q
	}
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.IsExported() && !quickKeywords[f.Name] && !v.Field(i).IsZero() {
			return q
		}
	}
	if s.Types != nil {
		types := s.Types.ToStrings()
		if len(types) != 1 {
			return q
		}
		q.typ = types[0]
	}
	switch q.typ {
	case "", "string", "integer", "object", "array":
	default:
		return q
	}
	if s.Const != nil {
		c, ok := (*s.Const).(string)
		if !ok {
			return q
		}
		q.constant = &c
	}
	if s.Enum != nil {
		for _, e := range s.Enum.Values {
			str, ok := e.(string)
			if !ok {
				return q
			}
			q.enum = append(q.enum, str)
		}
	}
	stringKeywords := s.Format != nil || s.Pattern != nil || s.MinLength != nil || s.MaxLength != nil
	numberKeywords := s.Minimum != nil || s.Maximum != nil
	objectKeywords := s.MaxProperties != nil || s.Required != nil || s.Properties != nil || s.AdditionalProperties != nil
	arrayKeywords := s.MaxItems != nil || s.Items2020 != nil
	if (stringKeywords && q.typ != "string") || (numberKeywords && q.typ != "integer") ||
		(objectKeywords && q.typ != "object") || (arrayKeywords && q.typ != "array") {
		return q // keywords that apply to another type than the one required
	}
	if s.Format != nil {
		q.format = s.Format.Validate
		q.sureFormat = sureFormats[s.Format.Name]
	}
	q.pattern = s.Pattern
	if s.MinLength != nil {
		q.minLen = *s.MinLength
	}
	if s.MaxLength != nil {
		q.maxLen = *s.MaxLength
	}
	if s.Minimum != nil {
		if !s.Minimum.IsInt() || !s.Minimum.Num().IsInt64() {
			return q
		}
		n := s.Minimum.Num().Int64()
		q.min = &n
	}
	if s.Maximum != nil {
		if !s.Maximum.IsInt() || !s.Maximum.Num().IsInt64() {
			return q
		}
		n := s.Maximum.Num().Int64()
		q.max = &n
	}
	if s.MaxItems != nil {
		q.maxItems = *s.MaxItems
	}
	if s.Items2020 != nil {
		q.items = newQuick(s.Items2020)
	}
	if s.MaxProperties != nil {
		q.maxProps = *s.MaxProperties
	}
	q.required = s.Required
	if len(s.Properties) > 0 {
		q.props = make(map[string]*quickSchema, len(s.Properties))
		for name, p := range s.Properties {
			q.props[name] = newQuick(p)
		}
	}
	switch ap := s.AdditionalProperties.(type) {
	case nil:
	case bool:
		if ap {
			return q
		}
		q.closed = true
	default:
		return q
	}
	q.known = true
	return q
}

// valid reports whether v certainly satisfies the schema; false means
// invalid or not known, and the full validator decides.
func (q *quickSchema) valid(v any) bool {
	if !q.known {
		return false
	}
	if q.constant != nil {
		if s, ok := v.(string); !ok || s != *q.constant {
			return false
		}
	}
	if q.enum != nil {
		if s, ok := v.(string); !ok || !slices.Contains(q.enum, s) {
			return false
		}
	}
	switch q.typ {
	case "string":
		s, ok := v.(string)
		return ok && q.validString(s)
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		return err == nil && (q.min == nil || i >= *q.min) && (q.max == nil || i <= *q.max)
	case "object":
		m, ok := v.(map[string]any)
		return ok && q.validObject(m)
	case "array":
		a, ok := v.([]any)
		if !ok || (q.maxItems >= 0 && len(a) > q.maxItems) {
			return false
		}
		for _, item := range a {
			if q.items != nil && !q.items.valid(item) {
				return false
			}
		}
	}
	return true
}

func (q *quickSchema) validString(s string) bool {
	if q.minLen >= 0 || q.maxLen >= 0 {
		n := utf8.RuneCountInString(s)
		if (q.minLen >= 0 && n < q.minLen) || (q.maxLen >= 0 && n > q.maxLen) {
			return false
		}
	}
	if q.pattern != nil && !q.pattern.MatchString(s) {
		return false
	}
	if q.format == nil || (q.sureFormat != nil && q.sureFormat(s)) {
		return true
	}
	return q.format(s) == nil
}

func (q *quickSchema) validObject(m map[string]any) bool {
	if q.maxProps >= 0 && len(m) > q.maxProps {
		return false
	}
	for _, name := range q.required {
		if _, ok := m[name]; !ok {
			return false
		}
	}
	for name, val := range m {
		p, ok := q.props[name]
		if !ok {
			if q.closed {
				return false
			}
			continue
		}
		if !p.valid(val) {
			return false
		}
	}
	return true
}

// validateSchema validates v against the named schema: confirmed by the
// quick check when it can, by the full validator otherwise.
func validateSchema(name string, v any) error {
	if quickCompiled()[name].valid(v) {
		return nil
	}
	return compiled()[name].Validate(v)
}
