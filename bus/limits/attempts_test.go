package limits

import "testing"

func TestAddressAttemptsKey(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"192.0.2.1", "::ffff:192.0.2.1"},
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"},
	} {
		if AddressAttemptsKey(tc.a) != AddressAttemptsKey(tc.b) {
			t.Errorf("%s and %s have different keys", tc.a, tc.b)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"192.0.2.1", "192.0.2.2"},
		{"2001:db8:1:2::1", "2001:db8:1:3::1"},
	} {
		if AddressAttemptsKey(tc.a) == AddressAttemptsKey(tc.b) {
			t.Errorf("%s and %s share a key", tc.a, tc.b)
		}
	}
}
