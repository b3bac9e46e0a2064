package storage

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
)

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testSpool(t *testing.T, dir string, max int64) *spool {
	t.Helper()
	s, err := newSpool(dir, max, discardLog(), metrics.NewSet())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.close() })
	return s
}

func testRows(n int) []ledgerRow {
	rows := make([]ledgerRow, n)
	for i := range rows {
		r := sampleRecord()
		r.RequestID = fmt.Sprintf("req-%d", i)
		rows[i].fill(&r)
	}
	return rows
}

// readAll adopts every segment another process left in s's directory and
// reads them to the end.
func readAll(t *testing.T, s *spool) []ledgerRow {
	t.Helper()
	s.adopt()
	var out []ledgerRow
	for seg := s.next(); seg != nil; seg = s.next() {
		for {
			rows, eof, err := s.read(seg, 7, nil)
			require.NoError(t, err)
			out = append(out, rows...)
			s.advance(seg)
			if eof {
				break
			}
		}
		s.finish(seg)
	}
	return out
}

// filesIn lists the files of dir whose names match pattern.
func filesIn(t *testing.T, dir, pattern string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, pattern))
	require.NoError(t, err)
	return paths
}

func segments(t *testing.T, dir string) []string { return filesIn(t, dir, spoolPattern) }

func requestIDs(rows []ledgerRow) []string {
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = string(rows[i].textBytes(textRequestID))
	}
	return ids
}

func TestSpoolReplaysWhatAGoneProcessLeft(t *testing.T) {
	dir := t.TempDir()
	old := testSpool(t, dir, 1<<20)
	want := testRows(20)
	require.NoError(t, old.append(want[:10], true))
	require.NoError(t, old.appendRow(&want[10], false))
	require.NoError(t, old.append(want[11:], false))
	require.NoError(t, old.syncActive())
	require.Len(t, segments(t, dir), 1)

	next := testSpool(t, dir, 1<<20)
	next.adopt()
	require.Empty(t, next.adopted, "a segment a live process holds is not adopted")

	require.NoError(t, old.close()) // the process is gone: its lock with it
	got := readAll(t, next)
	require.Equal(t, requestIDs(want), requestIDs(got))
	require.Empty(t, segments(t, dir), "a replayed segment is deleted")
	require.False(t, next.hasData())
}

func TestSpoolSkipsATornLastLine(t *testing.T) {
	dir := t.TempDir()
	old := testSpool(t, dir, 1<<20)
	want := testRows(5)
	require.NoError(t, old.append(want, true))
	path := segments(t, dir)[0]
	require.NoError(t, old.close())

	// A crash in the middle of a write leaves part of a line.
	line := appendSpoolLine(nil, &testRows(1)[0])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(line[:len(line)/2])
	require.NoError(t, err)
	require.NoError(t, f.Close())

	next := testSpool(t, dir, 1<<20)
	got := readAll(t, next)
	require.Equal(t, requestIDs(want), requestIDs(got), "every line before the torn one is kept")
	require.EqualValues(t, 1, next.torn.Get())
	require.Zero(t, next.corrupt.Get())
}

func TestSpoolSkipsDamagedLinesAndKeepsTheRest(t *testing.T) {
	dir := t.TempDir()
	old := testSpool(t, dir, 1<<20)
	want := testRows(6)
	require.NoError(t, old.append(want, true))
	path := segments(t, dir)[0]
	require.NoError(t, old.close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines[1][20] ^= 0x20                                                // a garbled line
	lines[3] = append(bytes.Repeat([]byte("x"), maxSpoolLine+10), '\n') // an overlong one
	require.NoError(t, os.WriteFile(path, bytes.Join(lines, nil), 0o600))

	next := testSpool(t, dir, 1<<20)
	got := readAll(t, next)
	require.Equal(t, []string{"req-0", "req-2", "req-4", "req-5"}, requestIDs(got))
	require.EqualValues(t, 2, next.corrupt.Get())
}

func TestSpoolBound(t *testing.T) {
	dir := t.TempDir()
	rows := testRows(1)
	rows[0].flags &^= flagBilled
	lineLen := int64(len(appendSpoolLine(nil, &rows[0])))
	s := testSpool(t, dir, 10*lineLen)
	for range 10 {
		require.NoError(t, s.appendRow(&rows[0], false))
	}
	require.ErrorIs(t, s.appendRow(&rows[0], false), errSpoolFull)
	require.ErrorIs(t, s.append(testRows(2), true), errSpoolFull)
	require.Equal(t, 10*lineLen, s.bytes())
	// A billed row is kept past the bound (Ledger.Saturated has refused
	// new billable work by then).
	billed := testRows(1)
	billed[0].flags |= flagBilled
	require.NoError(t, s.appendRow(&billed[0], false))
	require.Equal(t, 10*lineLen+int64(len(appendSpoolLine(nil, &billed[0]))), s.bytes())

	// Replaying frees the room.
	seg := s.next()
	require.NotNil(t, seg)
	got, eof, err := s.read(seg, 100, nil)
	require.NoError(t, err)
	require.True(t, eof)
	require.Len(t, got, 11)
	s.advance(seg)
	s.finish(seg)
	require.Zero(t, s.bytes())
	require.NoError(t, s.appendRow(&rows[0], false))
}

func TestSpoolRewindReadsAgain(t *testing.T) {
	s := testSpool(t, t.TempDir(), 1<<20)
	require.NoError(t, s.append(testRows(10), true))
	seg := s.next()
	first, _, err := s.read(seg, 4, nil)
	require.NoError(t, err)
	s.advance(seg)
	second, _, err := s.read(seg, 4, nil)
	require.NoError(t, err)
	s.rewind(seg) // PostgreSQL did not take them
	again, eof, err := s.read(seg, 100, nil)
	require.NoError(t, err)
	require.True(t, eof)
	require.Equal(t, []string{"req-0", "req-1", "req-2", "req-3"}, requestIDs(first))
	require.Equal(t, requestIDs(second), requestIDs(again[:4]))
	require.Len(t, again, 6)
}

func TestSpoolNamesItsSegmentsPerProcess(t *testing.T) {
	dir := t.TempDir()
	a, b := testSpool(t, dir, 1<<20), testSpool(t, dir, 1<<20)
	require.NotEqual(t, a.prefix, b.prefix)
	require.NoError(t, a.appendRow(&testRows(1)[0], true))
	require.NoError(t, b.appendRow(&testRows(1)[0], true))
	require.Len(t, segments(t, dir), 2)
	st, err := os.Stat(segments(t, dir)[0])
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

// SpoolBacklog sees what a ledger's directory holds for PostgreSQL: the
// journal of a ledger that has not closed, the spool segments written while
// the database is down, and nothing once every row is written and the
// ledger closed.
func TestSpoolBacklogSeesWhatWaitsForPostgres(t *testing.T) {
	w := newMemWriter()
	w.down.Store(true)
	f := newTestLedger(t, w, t.TempDir())
	spooled, journals := SpoolBacklog(f.dir)
	require.Zero(t, spooled)
	require.Equal(t, 1, journals, "a running ledger's journal")

	recordMany(f.l, "r", 4, 500)
	require.Error(t, f.l.Flush(ctxT(t)), "the rows are only in the spool")
	spooled, _ = SpoolBacklog(f.dir)
	require.Positive(t, spooled)

	w.down.Store(false)
	require.NoError(t, f.l.Flush(ctxT(t)))
	require.NoError(t, f.l.Close(ctxT(t)))
	spooled, journals = SpoolBacklog(f.dir)
	require.Zero(t, spooled)
	require.Zero(t, journals, "a ledger that wrote every row leaves nothing")
}
