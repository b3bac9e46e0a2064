package storage

import "time"

// cursorSkew is how far ahead of this process's clock a cursor's instant
// may be: stored instants come from the database's clock (or, for files,
// the gateway's), and the two may disagree a little.
const cursorSkew = 24 * time.Hour

// CursorTime is the instant a keyset cursor's Unix microseconds name, when
// it is one a list could have issued. A cursor's instant is a stored
// timestamp, so it falls between PostgreSQL's epoch (2000-01-01, before
// anything the gateway stores) and a day from now. Anything else was never
// issued, and outside PostgreSQL's range it would fail the query instead
// of paging: the caller refuses it like any other unreadable cursor.
func CursorTime(us int64) (time.Time, bool) {
	if us < pgEpochMicros || us > time.Now().Add(cursorSkew).UnixMicro() {
		return time.Time{}, false
	}
	return time.UnixMicro(us).UTC(), true
}
