package rules_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/storybus/storybus/rules"
)

// TestRuleOfFindsTheRefusalInAChain proves a refusal wrapped by callers is
// still found with its rule, message and path, and that an error without
// one is not taken for a refusal.
func TestRuleOfFindsTheRefusalInAChain(t *testing.T) {
	err := fmt.Errorf("verify: %w", rules.Refuse(rules.AuthTokenExpired, "the token has expired", ""))
	v, ok := rules.RuleOf(err)
	if !ok || v.Rule != rules.AuthTokenExpired || v.Message != "the token has expired" || v.Source != rules.SourcePolicy {
		t.Fatalf("RuleOf(%v) = %+v, %v", err, v, ok)
	}
	if _, ok := rules.RuleOf(errors.New("the store is down")); ok {
		t.Fatal("a plain error was taken for a refusal")
	}
	if _, ok := rules.RuleOf(nil); ok {
		t.Fatal("nil was taken for a refusal")
	}
}
