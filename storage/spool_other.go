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

// errJournalUnsupported is returned where files cannot be mapped; the
// ledger then runs without a journal.
var errJournalUnsupported = errors.New("the ledger journal is not supported on this platform")

// mapFile reports that the ledger journal is not supported here: the
// ledger then keeps rows in memory until they are written, as it did
// before the journal.
func mapFile(*os.File, int) ([]byte, error) { return nil, errJournalUnsupported }

func unmapFile([]byte) error { return nil }

// journalSupported is false: files are not mapped here.
const journalSupported = false
