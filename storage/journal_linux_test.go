package storage

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/edgegw/gateway/hotpath"
)

// minorFaults is the page faults the calling thread has taken that needed
// no disk read: among them, the first store to a page of a shared file
// mapping that is not yet writable.
func minorFaults(t *testing.T) int64 {
	var ru unix.Rusage
	require.NoError(t, unix.Getrusage(unix.RUSAGE_THREAD, &ru))
	return ru.Minflt
}

// TestWarmedSlotsTakeNoPageFault: a row Record writes into a page the
// writer has warmed costs no page fault on the request's path; into a
// page not yet writable, one row in four (a page holds four slots) takes
// one.
func TestWarmedSlotsTakeNoPageFault(t *testing.T) {
	const n = 256
	j := testJournal(t, 4*n)
	rows := testRows(2 * n)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	put := func(rows []ledgerRow) int64 {
		before := minorFaults(t)
		for i := range rows {
			if !j.put(&rows[i]) {
				t.Fatal("slot not free")
			}
		}
		return minorFaults(t) - before
	}
	put(rows[:1]) // the first call's own faults (stack, code) out of the count
	cold := put(rows[1:n])
	j.warm(journalWarmMost)
	warmed := put(rows[n:])
	t.Logf("page faults for %d rows: %d into cold pages, %d into warmed ones", n-1, cold, warmed)
	require.GreaterOrEqual(t, cold, int64(n/4-2))
	require.LessOrEqual(t, warmed, int64(2))
}

// TestLedgerWarmsTheJournalAheadOfRecord: the writer warms the slots ahead
// at its ticks, so a page's worth of Records after a tick takes none of
// the journal's page faults. The same Records with warming off take one
// for each of the 16 pages they fill (the test stays within the ring's
// first round, where no page is writable until something writes it).
// The fewest of ten rounds is compared, so a round the writer's tick came
// late for does not count.
func TestLedgerWarmsTheJournalAheadOfRecord(t *testing.T) {
	fewest := func(warm uint64) int64 {
		defer func(was uint64) { journalWarmMost = was }(journalWarmMost)
		journalWarmMost = warm
		w := newMemWriter()
		// A queue of 64 rows: its buffer's pages take their first-write
		// faults in the first round of Records and none after, whichever
		// pages the allocator gave it. The batch of 1,000 makes the
		// journal (queue plus batch) long enough that all ten rounds stay
		// in its first pass.
		f := newTestLedger(t, w, t.TempDir(), func(c *LedgerConfig) { c.QueueSize = 64; c.BatchSize = 1000 })
		defer func() { _ = f.l.Close(context.Background()) }()
		recs := make([]hotpath.UsageRecord, 10*64)
		for i := range recs {
			recs[i] = sampleRecord()
			recs[i].RequestID = fmt.Sprintf("r-%d", i)
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		f.l.Record(&recs[0]) // the call's own first faults out of the count
		least := int64(math.MaxInt64)
		for a := range 10 {
			time.Sleep(4 * f.l.cfg.FlushInterval)
			before := minorFaults(t)
			for i := max(a*64, 1); i < (a+1)*64; i++ {
				f.l.Record(&recs[i])
			}
			least = min(least, minorFaults(t)-before)
		}
		return least
	}
	cold, warmed := fewest(0), fewest(journalWarmMost)
	t.Logf("page faults for 64 Records: %d with warming off, %d with it on", cold, warmed)
	require.LessOrEqual(t, warmed, cold-12)
}
