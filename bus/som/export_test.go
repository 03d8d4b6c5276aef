package som

import "fmt"

// QuickAgrees checks that the quick schema check confirms nothing the full
// validator refuses, for the envelope and the payload of m. It reports
// whether the quick check confirmed both.
func QuickAgrees(m *Message) (bool, error) {
	doc := m.Doc
	checks := []struct {
		name string
		v    any
	}{{SchemaEnvelope, doc}}
	msgType, _ := doc["message_type"].(string)
	if family, known := FamilyOf(msgType); known {
		checks = append(checks, struct {
			name string
			v    any
		}{family, doc["payload"]})
	}
	all := true
	for _, c := range checks {
		quick := quickCompiled()[c.name].valid(c.v)
		if err := compiled()[c.name].Validate(c.v); quick && err != nil {
			return false, fmt.Errorf("the quick check confirmed what %s refuses: %v", c.name, err)
		}
		all = all && quick
	}
	return all, nil
}
