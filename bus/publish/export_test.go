package publish

// SetRecordsAhead bounds the records a recovery holds to n until the
// returned function restores the bound.
func SetRecordsAhead(n int) (restore func()) {
	old := recordsAhead
	recordsAhead = n
	return func() { recordsAhead = old }
}
