//go:build unix

package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// journalRows reads the rows a journal file holds that may not have
// reached PostgreSQL, as the next process would.
func journalRows(t *testing.T, path string) journalScan {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sc, err := readJournal(b)
	require.NoError(t, err)
	return sc
}

func journals(t *testing.T, dir string) []string { return filesIn(t, dir, journalPattern) }

// leaveJournal copies l's journal as it stands to a name of a process that
// is gone: what a SIGKILL at this moment would leave behind.
func leaveJournal(t *testing.T, l *Ledger, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(l.journal.path)
	require.NoError(t, err)
	path := filepath.Join(dir, name+".journal")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

func testJournal(t *testing.T, n int) *journal {
	t.Helper()
	j, err := openJournal(t.TempDir(), "ledger-test-1-00000000-", n)
	require.NoError(t, err)
	t.Cleanup(func() {
		if j.data != nil {
			j.close()
		}
	})
	return j
}

func TestJournalHoldsEveryQueuedRow(t *testing.T) {
	w := newMemWriter()
	w.gate = make(chan struct{}) // nothing reaches the database
	f := newTestLedger(t, w, t.TempDir(), func(c *LedgerConfig) { c.QueueSize = 100; c.BatchSize = 10 })
	defer close(w.gate)
	recordMany(f.l, "r", 4, 60)
	sc := journalRows(t, f.l.journal.path)
	require.Len(t, sc.rows, 60)
	require.Zero(t, sc.torn)
	require.ElementsMatch(t, idsOf("r", 60), requestIDs(sc.rows))
	require.Zero(t, f.counter("gateway_ledger_journal_full_total"))
}

func idsOf(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func TestJournalWrapsOverPersistedRows(t *testing.T) {
	w := newMemWriter()
	f := newTestLedger(t, w, t.TempDir(), func(c *LedgerConfig) { c.QueueSize = 4; c.BatchSize = 2 })
	ring := int(f.l.journal.n)
	for i := range 10 * ring {
		record(f.l, fmt.Sprintf("r-%d", i))
		if i%3 == 2 {
			require.NoError(t, f.l.Flush(ctxT(t)))
		}
	}
	require.NoError(t, f.l.Flush(ctxT(t)))
	requireExactlyOnce(t, w, "r", 10*ring)
	require.Zero(t, f.counter("gateway_ledger_journal_full_total"), "every slot was persisted before its turn came again")
	require.Greater(t, f.l.journal.next.Load(), uint64(ring), "the ring wrapped")
	sc := journalRows(t, f.l.journal.path)
	require.Empty(t, sc.rows, "every row is marked persisted")
	require.Equal(t, ring, sc.stale)
}

func TestJournalFullSendsRowsToTheSpool(t *testing.T) {
	w := newMemWriter()
	w.gate = make(chan struct{}) // the writer is stuck in a slow write
	dir := t.TempDir()
	f := newTestLedger(t, w, dir, func(c *LedgerConfig) { c.QueueSize = 4; c.BatchSize = 2 })
	ring := int(f.l.journal.n)
	recordMany(f.l, "r", 1, 50)
	require.Positive(t, f.counter("gateway_ledger_journal_full_total"), "a slot holding a row not yet persisted is not overwritten")
	sc := journalRows(t, f.l.journal.path)
	require.LessOrEqual(t, len(sc.rows), ring)
	require.Zero(t, sc.torn)
	require.Positive(t, f.l.spool.ownBytes.Load(), "what the journal does not hold is in the spool")
	close(w.gate)
	require.NoError(t, f.l.Flush(ctxT(t)))
	requireExactlyOnce(t, w, "r", 50)
}

func TestJournalDetectsTornAndStaleSlots(t *testing.T) {
	j := testJournal(t, 4)
	rows := testRows(4)
	for i := range rows {
		require.True(t, j.put(&rows[i]))
	}
	j.done(&rows[0]) // persisted: stale from now on
	// A kill in the middle of a copy: the sequence of a new row is in, the
	// line half-written.
	s := j.slot(uint64(rows[1].jslot))
	copy(s[journalSlotHeader+40:], "garbage")
	// A kill between the claim and the copy: a new sequence over the old,
	// persisted line.
	s = j.slot(uint64(rows[2].jslot))
	word(s, 8).Store(rows[2].jseq)
	word(s, 0).Store(rows[2].jseq + 4)

	b := make([]byte, len(j.data))
	copy(b, j.data)
	sc, err := readJournal(b)
	require.NoError(t, err)
	require.Equal(t, []string{"req-3"}, requestIDs(sc.rows))
	require.Equal(t, 2, sc.torn)
	require.Equal(t, 1, sc.stale)
	require.Equal(t, rows[3].rowID, sc.rows[0].rowID)

	t.Run("not a journal", func(t *testing.T) {
		_, err := readJournal([]byte(strings.Repeat("x", 200)))
		require.Error(t, err)
		b := make([]byte, len(j.data))
		copy(b, j.data)
		_, err = readJournal(b[:journalHeaderSize+100])
		require.ErrorContains(t, err, "truncated")
	})
}

func TestJournalRejectsARowTooLongForASlot(t *testing.T) {
	j := testJournal(t, 2)
	r := sampleRecord()
	r.RequestID = strings.Repeat("\x01", 200) // escaped six times over
	var row ledgerRow
	row.fill(&r)
	require.False(t, j.put(&row))
	require.Zero(t, row.jseq)
	ok := testRows(1)
	require.True(t, j.put(&ok[0]), "the slot is free again")
	require.True(t, j.put(&ok[0]), "and so is the other")
}

func TestJournalOfAKilledProcessIsReplayedOnce(t *testing.T) {
	dir := t.TempDir()
	w := newMemWriter()
	w.gate = make(chan struct{})
	victim := newTestLedger(t, w, dir, func(c *LedgerConfig) { c.QueueSize = 200; c.BatchSize = 50 })
	defer close(w.gate)
	recordMany(victim.l, "r", 4, 120)
	// The victim's writer adopts the journals of gone processes when it
	// starts. Once it waits at the gate it has, and the next adoption is
	// adoptInterval away; the journal left before that would be its own to
	// adopt.
	require.Eventually(t, func() bool { return w.gated.Load() > 0 }, 5*time.Second, time.Millisecond)
	dead := leaveJournal(t, victim.l, dir, "ledger-gone-1-00000000")
	ownPath := victim.l.journal.path

	db := newMemWriter()
	next := newTestLedger(t, db, dir)
	require.NoError(t, next.l.Flush(ctxT(t)))
	requireExactlyOnce(t, db, "r", 120)
	require.EqualValues(t, 120, next.counter("gateway_ledger_journal_rows_recovered_total"))
	require.NoFileExists(t, dead, "a replayed journal is deleted")
	require.FileExists(t, ownPath, "a live process's journal is its own")

	// The same journal again (a crash after its rows were spooled, before
	// it was deleted): nothing is written twice.
	leaveJournal(t, victim.l, dir, "ledger-gone-2-00000000")
	again := newTestLedger(t, db, dir)
	require.NoError(t, again.l.Flush(ctxT(t)))
	requireExactlyOnce(t, db, "r", 120)
	require.EqualValues(t, 120, again.counter("gateway_ledger_rows_duplicate_total"))
}

func TestJournalIsDeletedAtACleanCloseAndKeptWhenRowsRemain(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		dir := t.TempDir()
		f := newTestLedger(t, newMemWriter(), dir)
		recordMany(f.l, "r", 2, 30)
		require.NoError(t, f.l.Close(ctxT(t)))
		require.Empty(t, journals(t, dir))
	})
	t.Run("spool unwritable", func(t *testing.T) {
		dir := t.TempDir()
		w := newMemWriter()
		w.down.Store(true)
		f := newTestLedger(t, w, dir, func(c *LedgerConfig) { c.SpoolMaxBytes = 1 << 20; c.QueueSize = 8; c.BatchSize = 4 })
		// Fill the spool to its bound so that the drain cannot take the
		// queue's rows: they stay in the journal.
		f.l.spool.mu.Lock()
		f.l.spool.ownBytes.Store(1 << 20)
		f.l.spool.mu.Unlock()
		for i := range 4 {
			record(f.l, fmt.Sprintf("r-%d", i))
		}
		require.Error(t, f.l.Close(context.Background()))
		paths := journals(t, dir)
		require.Len(t, paths, 1)
		require.Len(t, journalRows(t, paths[0]).rows, 4)
	})
}

// BenchmarkJournalPut measures the journal's share of Record: encoding the
// row as a spool line into its slot, with its checksum.
func BenchmarkJournalPut(b *testing.B) {
	j, err := openJournal(b.TempDir(), "ledger-bench-1-00000000-", 1<<14)
	require.NoError(b, err)
	defer j.close()
	rows := testRows(1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		row := rows[0]
		if !j.put(&row) {
			b.Fatal("slot not free")
		}
		j.done(&row)
	}
}

// BenchmarkSpoolLine measures encoding a row as a spool line alone.
func BenchmarkSpoolLine(b *testing.B) {
	rows := testRows(1)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for range b.N {
		buf = appendSpoolLine(buf[:0], &rows[0])
	}
}
