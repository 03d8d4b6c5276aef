//go:build !linux

package startpages

import "errors"

// Release is not supported outside Linux: it changes nothing.
func Release() (before, after int64, err error) {
	return 0, 0, errors.ErrUnsupported
}
