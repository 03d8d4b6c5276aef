package store

// AllowsMessageTTLs is allowsMessageTTLs, for the tests of package
// store_test.
var AllowsMessageTTLs = allowsMessageTTLs

// WithoutExpiringRemovals makes w remove records as it does on a records
// bucket a server before 2.11 made: deleted, with a marker that stays.
func (w *Workspace) WithoutExpiringRemovals() { w.removalsExpire = false }
