//go:build !linux

package startpages

import "errors"

// Release is not supported outside Linux: it changes nothing.
func Release(Mode) (before, after int64, err error) {
	return 0, 0, errors.ErrUnsupported
}

// Resident is not supported outside Linux.
func Resident() (int64, error) {
	return 0, errors.ErrUnsupported
}
