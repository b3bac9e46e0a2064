//go:build !unix

package storage

import (
	"errors"
	"os"
)

// lockFile reports that segments cannot be locked here: the spool then
// creates no segment, and adopts none.
func lockFile(*os.File) error {
	return errors.New("file locks are not supported on this platform")
}
