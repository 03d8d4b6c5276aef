package cli

import "testing"

// TestSharedRecordsBoundFlag: --shared-records-max-bytes takes bytes or a
// quantity from 1Mi to 1Pi (as the BusPool field), and only with --pool; unset asks for none.
func TestSharedRecordsBoundFlag(t *testing.T) {
	for _, tc := range []struct {
		pool, bound string
		want        int64
		refused     bool
	}{
		{pool: "ns_shared", bound: "", want: 0},
		{pool: "ns_shared", bound: "2Gi", want: 2 << 30},
		{pool: "ns_shared", bound: "1048576", want: 1 << 20},
		{pool: "ns_shared", bound: "512Ki", refused: true},
		{pool: "ns_shared", bound: "1Pi", want: 1 << 50},
		{pool: "ns_shared", bound: "2Pi", refused: true},
		{pool: "ns_shared", bound: "lots", refused: true},
		{pool: "", bound: "2Gi", refused: true},
	} {
		got, err := sharedRecordsBound(ServeOptions{Pool: tc.pool, SharedRecordsMaxBytes: tc.bound})
		if (err != nil) != tc.refused || got != tc.want {
			t.Errorf("--pool %q --shared-records-max-bytes %q: %d, %v; want %d, refused %v", tc.pool, tc.bound, got, err, tc.want, tc.refused)
		}
	}
}
