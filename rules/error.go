package rules

import "errors"

// Error is a refusal as a Go error: the rule a request breaks, with the
// message and path its answer carries. Packages below the HTTP layer
// (authentication, policy) return it; the HTTP layer finds it with
// errors.As (or RuleOf) and answers it from the catalogue.
type Error struct {
	Violation
}

// Error returns the rule id and the message.
func (e *Error) Error() string { return e.Rule + ": " + e.Message }

// Refuse returns the refusal of rule id as an error, with the message and
// path its answer carries.
func Refuse(id, message, path string) *Error { return &Error{New(id, message, path)} }

// RuleOf returns the refusal in err's chain, if there is one.
func RuleOf(err error) (Violation, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Violation, true
	}
	return Violation{}, false
}
