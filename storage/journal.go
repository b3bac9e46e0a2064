package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/VictoriaMetrics/metrics"
)

// The crash journal keeps every row between Record and the moment it is in
// PostgreSQL or the spool, in a file mapped into memory (MAP_SHARED): a
// row is written there with a plain memory copy, no system call, and the
// pages belong to the kernel's page cache, so they outlive the process
// when it is killed (SIGKILL, a panic, the OOM killer). They do not
// outlive the host losing power: nothing fsyncs them (docs/ledger.md).
//
// File layout, all integers little-endian:
//
//	header (journalHeaderSize bytes): magic "GWJRNL", version (uint16),
//	    slot size (uint32), slot count (uint32)
//	slots, each journalSlotSize bytes:
//	    0  seq   uint64  the row's sequence number; 0: never used
//	    8  done  uint64  the last seq of this slot that is in PostgreSQL or the spool
//	    16 len   uint32  length of the line
//	    20 crc   uint32  CRC-32C of seq, len and the line
//	    24 line          the row as one spool line (appendSpoolLine)
//
// A slot whose seq is above its done mark and whose checksum holds is a
// row that may not have reached PostgreSQL: replay inserts it (again, at
// worst; the insert skips row ids already present). A checksum that does
// not hold is a slot torn by the kill mid-copy (its Record never
// returned) and is skipped. A slot whose seq equals done is stale: its row
// was persisted, and the slot may be reused.
const (
	journalMagic      = "GWJRNL"
	journalVersion    = 1
	journalHeaderSize = 64
	journalSlotSize   = 1024
	journalSlotHeader = 24
	journalPattern    = "ledger-*.journal"
)

// How far ahead of Record the writer makes the journal's pages writable at
// each tick (warm): four times the slots claimed since the last tick, at
// least journalWarmMin, at most journalWarmMost (a tick's rows at 5,000
// requests a second; faster, the ring comes round before the kernel writes
// a page back, and Record finds it writable anyway). The window follows
// the rate so that after a writeback the tick that makes it writable again
// takes a few page faults, not a thousand in a row. A test turns it off
// (journalWarmMost 0).
const journalWarmMin = 64

var journalWarmMost uint64 = 1024

// journal is one process's crash journal: a ring of slots, one row each.
// Record claims the slot its sequence number falls on; the writer marks a
// slot done once the row is in PostgreSQL or the spool. A slot still
// holding a row not yet done is not overwritten: Record sends its row to
// the spool instead.
type journal struct {
	path string
	f    *os.File
	data []byte // the mapping
	n    uint64 // slots
	next atomic.Uint64
	// warmed is next as the writer's last warm saw it (the writer's own).
	warmed uint64
}

// openJournal creates and maps this process's journal, named after its
// spool prefix, locked, with n slots.
func openJournal(dir, prefix string, n int) (*journal, error) {
	path := filepath.Join(dir, strings.TrimSuffix(prefix, "-")+".journal")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot create ledger journal: %w", err)
	}
	fail := func(err error) (*journal, error) {
		f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	if err := lockFile(f); err != nil {
		return fail(fmt.Errorf("cannot lock ledger journal: %w", err))
	}
	size := journalHeaderSize + n*journalSlotSize
	var hdr [journalHeaderSize]byte
	putJournalHeader(hdr[:], n)
	if _, err := f.WriteAt(hdr[:], 0); err != nil {
		return fail(fmt.Errorf("cannot write ledger journal: %w", err))
	}
	if err := f.Truncate(int64(size)); err != nil {
		return fail(fmt.Errorf("cannot size ledger journal: %w", err))
	}
	data, err := mapFile(f, size)
	if err != nil {
		return fail(fmt.Errorf("cannot map ledger journal: %w", err))
	}
	// Make the new name itself durable, as the spool does for segments.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return &journal{path: path, f: f, data: data, n: uint64(n)}, nil
}

func putJournalHeader(b []byte, n int) {
	copy(b, journalMagic)
	binary.LittleEndian.PutUint16(b[6:], journalVersion)
	binary.LittleEndian.PutUint32(b[8:], journalSlotSize)
	binary.LittleEndian.PutUint32(b[12:], uint32(n))
}

func (j *journal) slot(i uint64) []byte {
	off := journalHeaderSize + i*journalSlotSize
	return j.data[off : off+journalSlotSize : off+journalSlotSize]
}

// word is the slot's 64-bit field at off, for atomic access: the mapping
// is page-aligned and every field sits at a multiple of eight.
func word(slot []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&slot[off]))
}

// put writes row into its slot and notes the slot in the row. It reports
// false, writing nothing, when the slot still holds a row not yet done
// (the ring is full) or the row's line does not fit a slot; the caller
// then takes the spool path. It allocates nothing for a row that fits.
func (j *journal) put(row *ledgerRow) bool {
	seq := j.next.Add(1)
	i := seq % j.n
	s := j.slot(i)
	seqW, doneW := word(s, 0), word(s, 8)
	old := seqW.Load()
	if old != doneW.Load() || !seqW.CompareAndSwap(old, seq) {
		return false
	}
	// The slot is ours until the writer marks it done. Until the checksum
	// below is written it reads as torn, never as the old row.
	line := appendSpoolLine(s[journalSlotHeader:journalSlotHeader], row)
	if len(line) > journalSlotSize-journalSlotHeader || &line[0] != &s[journalSlotHeader] {
		// Too long for a slot (texts far beyond any real row): give the
		// slot back as it was.
		doneW.Store(seq)
		return false
	}
	binary.LittleEndian.PutUint32(s[16:], uint32(len(line)))
	binary.LittleEndian.PutUint32(s[20:], journalSum(s, len(line)))
	row.jslot, row.jseq = uint32(i), seq
	return true
}

// warm makes writable now the pages of the slots Record will claim next.
// A page of a shared file mapping that the kernel has written back is
// write-protected again, so that the next store marks it dirty, and that
// store takes a page fault into the file system: 30–150 µs on ext4 on the
// test machine, once per page (four rows) after every writeback. At a few
// hundred requests a second the ring comes round after the writeback, so
// one row in four paid it on its request's path. The writer calls warm at
// each tick instead, for the slots the next ticks' rows will claim (at
// most most): an atomic add of zero to a slot's done mark changes nothing,
// and leaves its page writable and dirty until the next writeback.
func (j *journal) warm(most uint64) {
	if j == nil || most == 0 {
		return
	}
	next := j.next.Load()
	ahead := min(max(4*(next-j.warmed), journalWarmMin), most, j.n)
	j.warmed = next
	for seq := next + 1; seq <= next+ahead; seq++ {
		word(j.slot(seq%j.n), 8).Add(0)
	}
}

// journalSum is the checksum of a slot's seq, length and line.
func journalSum(s []byte, n int) uint32 {
	sum := crc32.Update(0, crcTable, s[0:8])
	sum = crc32.Update(sum, crcTable, s[16:20])
	return crc32.Update(sum, crcTable, s[journalSlotHeader:journalSlotHeader+n])
}

// done marks the row's slot as persisted: in PostgreSQL or in the spool.
// Rows that never went through the journal are ignored.
func (j *journal) done(row *ledgerRow) {
	if j == nil || row.jseq == 0 {
		return
	}
	word(j.slot(uint64(row.jslot)), 8).Store(row.jseq)
}

// pending counts the slots holding a row not yet done.
func (j *journal) pending() int {
	n := 0
	for i := range j.n {
		s := j.slot(i)
		if word(s, 0).Load() != word(s, 8).Load() {
			n++
		}
	}
	return n
}

// close unmaps the journal and lets go of its lock. With nothing pending
// the file is deleted; otherwise it stays for the next process to replay.
func (j *journal) close() int {
	left := j.pending()
	if left == 0 {
		_ = os.Remove(j.path)
	}
	_ = unmapFile(j.data)
	j.data = nil
	j.f.Close()
	return left
}

// journalScan is what reading a journal file found.
type journalScan struct {
	rows  []ledgerRow // rows not marked done, in slot order
	torn  int         // slots whose checksum does not hold
	stale int         // slots whose rows were persisted
}

// readJournal reads a journal file's rows that may not have reached
// PostgreSQL.
func readJournal(b []byte) (journalScan, error) {
	var sc journalScan
	if len(b) < journalHeaderSize || string(b[:6]) != journalMagic {
		return sc, errors.New("cannot read ledger journal: not a journal")
	}
	if v := binary.LittleEndian.Uint16(b[6:]); v != journalVersion {
		return sc, fmt.Errorf("cannot read ledger journal: version %d", v)
	}
	size := int(binary.LittleEndian.Uint32(b[8:]))
	n := int(binary.LittleEndian.Uint32(b[12:]))
	if size < journalSlotHeader+16 || len(b) < journalHeaderSize+n*size {
		return sc, errors.New("cannot read ledger journal: truncated")
	}
	for i := range n {
		s := b[journalHeaderSize+i*size : journalHeaderSize+(i+1)*size]
		seq, done := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[8:])
		if seq == 0 || seq == done {
			if seq != 0 {
				sc.stale++
			}
			continue
		}
		ln := int(binary.LittleEndian.Uint32(s[16:]))
		if ln < 2 || ln > size-journalSlotHeader || binary.LittleEndian.Uint32(s[20:]) != journalSum(s, ln) ||
			s[journalSlotHeader+ln-1] != '\n' {
			sc.torn++
			continue
		}
		var row ledgerRow
		if err := parseSpoolLine(s[journalSlotHeader:journalSlotHeader+ln-1], &row); err != nil {
			sc.torn++
			continue
		}
		sc.rows = append(sc.rows, row)
	}
	return sc, nil
}

// journalMetrics count what adoption found.
type journalMetrics struct {
	recovered, torn, full *metrics.Counter
}

// adoptJournals moves the rows of journals no live process holds (left by
// processes that were killed) into the spool, fsync'd, and deletes the
// journals; the spool's replay then writes them to PostgreSQL. A journal
// whose rows the spool cannot take stays, for the next attempt. Writer
// goroutine only.
func (l *Ledger) adoptJournals() {
	paths, err := filepath.Glob(filepath.Join(l.cfg.SpoolDir, journalPattern))
	if err != nil {
		return
	}
	for _, path := range paths {
		if l.journal != nil && path == l.journal.path {
			continue
		}
		l.adoptJournal(path)
	}
}

func (l *Ledger) adoptJournal(path string) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if lockFile(f) != nil {
		return // a live process holds it
	}
	fst, err1 := f.Stat()
	pst, err2 := os.Stat(path)
	if err1 != nil || err2 != nil || !os.SameFile(fst, pst) {
		return // replayed and deleted by another process meanwhile
	}
	b := make([]byte, fst.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		l.logWriteError("cannot read a ledger journal", err)
		return
	}
	sc, err := readJournal(b)
	if err != nil {
		l.logWriteError("cannot replay a ledger journal; left in place", fmt.Errorf("%s: %w", filepath.Base(path), err))
		return
	}
	for rows := sc.rows; len(rows) > 0; {
		k := min(len(rows), l.cfg.BatchSize)
		if err := l.spool.append(rows[:k], true); err != nil {
			l.logWriteError("cannot move a ledger journal's rows to the spool; left in place", err)
			return
		}
		l.m.spooled.Add(k)
		rows = rows[k:]
	}
	if err := os.Remove(path); err != nil {
		l.logWriteError("cannot delete a replayed ledger journal", err)
		return
	}
	l.jm.recovered.Add(len(sc.rows))
	l.jm.torn.Add(sc.torn)
	if len(sc.rows)+sc.torn > 0 {
		l.log.Info("ledger recovered the journal of a process that is gone", "journal", filepath.Base(path),
			"rows", len(sc.rows), "torn_slots", sc.torn)
	}
}
