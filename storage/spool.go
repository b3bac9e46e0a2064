package storage

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// errSpoolFull is returned when a write would take the process's spool over
// its bound.
var errSpoolFull = errors.New("ledger spool is full")

// spoolPattern matches every spool segment, this process's and others'.
const spoolPattern = "ledger-*.spool"

// maxSpoolLine bounds one spool line when reading: real lines are under a
// kilobyte, so a longer one is damage and is skipped.
const maxSpoolLine = 64 << 10

// spool is the ledger's local, append-only overflow: segment files of spool
// lines (appendSpoolLine) in one directory, shared by every process of a
// host. Each process appends to an active segment of its own, named after
// the host, the process id and a random tag, and holds an exclusive flock
// on every segment it owns until the segment has been replayed and deleted;
// a segment nobody holds a lock on was left by a process that is gone, and
// any process may adopt it and replay it.
//
// Appends come from the writer goroutine (a batch PostgreSQL did not take)
// and from Record (a row the full queue did not take); everything else
// (sealing, adopting, reading, deleting) happens on the writer goroutine.
type spool struct {
	dir    string
	max    int64
	prefix string // ledger-<host>-<pid>-<tag>-
	log    *slog.Logger

	corrupt, torn *metrics.Counter

	mu     sync.Mutex // guards active, seq, buf and closed
	active *segment
	seq    int
	buf    []byte
	closed bool // after close, each append writes a segment of its own and lets go of it

	dirty      atomic.Bool  // the active segment has lines not yet fsync'd
	ownBytes   atomic.Int64 // bytes in this process's own segments, active and sealed
	otherBytes atomic.Int64 // bytes in adopted segments not yet replayed

	// Writer goroutine only.
	sealed  []*segment // own segments closed for appends, oldest first
	adopted []*segment // segments of gone processes
}

// segment is one spool file this process holds the lock on.
type segment struct {
	path string
	f    *os.File
	size int64 // bytes in the file (fixed once sealed or adopted)
	own  bool

	// Replay position: every line before done is in PostgreSQL; the reader
	// stands at rdOff, having read lines not yet written.
	done  int64
	rd    *bufio.Reader
	rdOff int64
}

func newSpool(dir string, max int64, log *slog.Logger, set *metrics.Set) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create ledger spool directory: %w", err)
	}
	host, _ := os.Hostname()
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	s := &spool{
		dir:     dir,
		max:     max,
		prefix:  "ledger-" + safeName(host) + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(tag[:]) + "-",
		log:     log,
		corrupt: set.NewCounter("gateway_ledger_spool_corrupt_lines_total"),
		torn:    set.NewCounter("gateway_ledger_spool_torn_lines_total"),
	}
	// Find out now, not during an outage, that the directory is unusable.
	probe, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("cannot write to ledger spool directory: %w", err)
	}
	probe.Close()
	_ = os.Remove(probe.Name())
	return s, nil
}

// safeName keeps a host name to letters, digits, dots and dashes.
func safeName(s string) string {
	if s == "" {
		return "host"
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

// append writes rows to the active segment in one write. With sync, it
// fsyncs before returning; otherwise the segment is marked dirty for the
// writer's next syncActive. A failed write is cut off again, so no torn
// line ever sits in front of a later one.
func (s *spool) append(rows []ledgerRow, sync bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf := s.buf[:0]
	for i := range rows {
		buf = appendSpoolLine(buf, &rows[i])
	}
	s.buf = buf
	return s.writeLocked(buf, sync, false)
}

// appendRow is append for one row.
func (s *spool) appendRow(row *ledgerRow, sync bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = appendSpoolLine(s.buf[:0], row)
	// A billed row is money owed for an answer already given: admission
	// refuses billable work once the spool is at its bound (Saturated), so
	// the billed rows that still come are those of requests in flight then,
	// one each, and they are kept past the bound rather than lost.
	return s.writeLocked(s.buf, sync, row.flags&flagBilled != 0)
}

// writeLocked appends buf to the active segment; past the spool's bound
// only when overBound.
func (s *spool) writeLocked(buf []byte, sync, overBound bool) error {
	if !overBound && s.ownBytes.Load()+int64(len(buf)) > s.max {
		return errSpoolFull
	}
	if s.active == nil {
		seg, err := s.create()
		if err != nil {
			return err
		}
		s.active = seg
	}
	seg := s.active
	if _, err := seg.f.Write(buf); err != nil {
		if terr := seg.f.Truncate(seg.size); terr != nil {
			// The segment may now end in a partial line: seal it so that
			// nothing is appended behind one; replay skips a torn tail.
			if n := fileSize(seg.f, seg.size); n > seg.size {
				s.ownBytes.Add(n - seg.size)
				seg.size = n
			}
			s.sealLocked()
		}
		return fmt.Errorf("cannot write ledger spool: %w", err)
	}
	seg.size += int64(len(buf))
	s.ownBytes.Add(int64(len(buf)))
	if s.closed {
		// Nobody replays this process's segments any more: make the row
		// durable and let the segment go, for the next process to adopt.
		err := seg.f.Sync()
		seg.f.Close()
		s.active = nil
		if err != nil {
			return fmt.Errorf("cannot sync ledger spool: %w", err)
		}
		return nil
	}
	if !sync {
		s.dirty.Store(true)
		return nil
	}
	if err := seg.f.Sync(); err != nil {
		return fmt.Errorf("cannot sync ledger spool: %w", err)
	}
	return nil
}

func fileSize(f *os.File, fallback int64) int64 {
	if st, err := f.Stat(); err == nil {
		return st.Size()
	}
	return fallback
}

// create opens a new segment of this process's, locked.
func (s *spool) create() (*segment, error) {
	s.seq++
	path := filepath.Join(s.dir, s.prefix+fmt.Sprintf("%06d", s.seq)+".spool")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot create ledger spool segment: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("cannot lock ledger spool segment: %w", err)
	}
	// Make the new name itself durable.
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return &segment{path: path, f: f, own: true}, nil
}

// syncActive fsyncs lines Record appended since the last sync.
func (s *spool) syncActive() error {
	if !s.dirty.Swap(false) {
		return nil
	}
	s.mu.Lock()
	seg := s.active
	s.mu.Unlock()
	if seg == nil {
		return nil // sealed since, and sealing synced it
	}
	// The writer goroutine is the only one that closes a segment, so f
	// stays open while it syncs outside the lock.
	if err := seg.f.Sync(); err != nil {
		s.dirty.Store(true)
		return fmt.Errorf("cannot sync ledger spool: %w", err)
	}
	return nil
}

// seal closes the active segment for appends, so it can be replayed; the
// next append starts a new one.
func (s *spool) seal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealLocked()
}

func (s *spool) sealLocked() {
	if s.active == nil || s.active.size == 0 {
		return
	}
	_ = s.active.f.Sync()
	s.sealed = append(s.sealed, s.active)
	s.active = nil
}

// hasData reports whether any segment holds rows not yet replayed.
func (s *spool) hasData() bool { return s.ownBytes.Load()+s.otherBytes.Load() > 0 }

// pending returns the segments closed for appends that wait for replay.
func (s *spool) pending() []*segment {
	return append(append([]*segment(nil), s.adopted...), s.sealed...)
}

// sealedOrAdopted reports whether a segment closed for appends waits.
func (s *spool) sealedOrAdopted() bool { return len(s.sealed)+len(s.adopted) > 0 }

// bytes is what the spool holds, own and adopted.
func (s *spool) bytes() int64 { return s.ownBytes.Load() + s.otherBytes.Load() }

// next returns the segment to replay next, sealing the active one first
// when nothing older waits; nil when there is none.
func (s *spool) next() *segment {
	if len(s.adopted) > 0 {
		return s.adopted[0]
	}
	if len(s.sealed) == 0 {
		s.seal()
	}
	if len(s.sealed) > 0 {
		return s.sealed[0]
	}
	return nil
}

// adopt takes over the segments of processes that are gone: those whose
// lock is free. A segment whose name was removed between open and lock
// (another process replayed it) is let go.
func (s *spool) adopt() {
	paths, err := filepath.Glob(filepath.Join(s.dir, spoolPattern))
	if err != nil {
		return
	}
	held := make(map[string]bool, len(s.adopted))
	for _, seg := range s.adopted {
		held[seg.path] = true
	}
	for _, path := range paths {
		if held[path] || strings.HasPrefix(filepath.Base(path), s.prefix) {
			continue
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if lockFile(f) != nil {
			f.Close() // a live process holds it
			continue
		}
		fst, err1 := f.Stat()
		pst, err2 := os.Stat(path)
		if err1 != nil || err2 != nil || !os.SameFile(fst, pst) {
			f.Close()
			continue
		}
		seg := &segment{path: path, f: f, size: fst.Size()}
		s.adopted = append(s.adopted, seg)
		s.otherBytes.Add(seg.size)
		s.log.Info("ledger adopted a spool segment left by another process", "segment", filepath.Base(path), "bytes", seg.size)
	}
}

// read reads up to max rows of seg from its reader position into out.
// eof reports that the segment has no more lines. Damaged lines are
// skipped, counted and logged: a line the checksum rejects anywhere, and a
// last line without its newline (torn by a crash).
func (s *spool) read(seg *segment, max int, out []ledgerRow) (rows []ledgerRow, eof bool, err error) {
	if seg.rd == nil {
		seg.rd = bufio.NewReaderSize(io.NewSectionReader(seg.f, seg.done, seg.size-seg.done), maxSpoolLine)
		seg.rdOff = seg.done
	}
	for len(out) < max {
		line, err := seg.rd.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			start := seg.rdOff
			seg.rdOff += int64(len(line))
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = seg.rd.ReadSlice('\n')
				seg.rdOff += int64(len(line))
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return out, false, fmt.Errorf("cannot read ledger spool: %w", err)
			}
			s.damaged(seg, start, "line too long")
			if err != nil {
				return out, true, nil
			}
			continue
		case errors.Is(err, io.EOF):
			if len(line) > 0 {
				s.torn.Inc()
				s.log.Warn("ledger spool segment ends in a torn line; skipped", "segment", filepath.Base(seg.path),
					"offset", seg.rdOff, "bytes", len(line))
				seg.rdOff += int64(len(line))
			}
			return out, true, nil
		case err != nil:
			return out, false, fmt.Errorf("cannot read ledger spool: %w", err)
		}
		start := seg.rdOff
		seg.rdOff += int64(len(line))
		out = append(out, ledgerRow{})
		if perr := parseSpoolLine(line[:len(line)-1], &out[len(out)-1]); perr != nil {
			out = out[:len(out)-1]
			s.damaged(seg, start, perr.Error())
		}
	}
	return out, false, nil
}

func (s *spool) damaged(seg *segment, off int64, why string) {
	s.corrupt.Inc()
	s.log.Error("ledger spool line is damaged; skipped", "segment", filepath.Base(seg.path), "offset", off, "reason", why)
}

// advance records that every line read from seg so far is in PostgreSQL.
func (s *spool) advance(seg *segment) { seg.done = seg.rdOff }

// rewind makes the next read start again after the last advance.
func (s *spool) rewind(seg *segment) { seg.rd = nil }

// finish deletes a fully replayed segment and lets go of it.
func (s *spool) finish(seg *segment) {
	if err := os.Remove(seg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Error("cannot delete replayed ledger spool segment", "segment", filepath.Base(seg.path), "err", err)
	}
	seg.f.Close()
	if seg.own {
		s.sealed = removeSegment(s.sealed, seg)
		s.ownBytes.Add(-seg.size)
	} else {
		s.adopted = removeSegment(s.adopted, seg)
		s.otherBytes.Add(-seg.size)
	}
}

func removeSegment(list []*segment, seg *segment) []*segment {
	for i, x := range list {
		if x == seg {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// close fsyncs and closes every segment, releasing the locks: what is left
// is replayed by the next process to start here, or adopted by a live one.
// The spool stays usable: each later append writes and fsyncs a segment of
// its own and closes it at once.
func (s *spool) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var err error
	if s.active != nil {
		if serr := s.active.f.Sync(); serr != nil {
			err = fmt.Errorf("cannot sync ledger spool: %w", serr)
		}
		s.active.f.Close()
		if s.active.size == 0 {
			_ = os.Remove(s.active.path)
		}
		s.active = nil
	}
	for _, seg := range s.sealed {
		seg.f.Close()
	}
	for _, seg := range s.adopted {
		seg.f.Close()
	}
	s.sealed, s.adopted = nil, nil
	s.ownBytes.Store(0)
	s.otherBytes.Store(0)
	return err
}

// SpoolBacklog reports what a ledger spool directory (LedgerConfig.SpoolDir)
// holds for PostgreSQL: the bytes of its spool segments, and how many crash
// journals are in it. A journal stays only with rows pending, when its
// process closed before writing them or did not close at all. A process
// that starts with the directory writes both.
func SpoolBacklog(dir string) (spooled int64, journals int) {
	segments, _ := filepath.Glob(filepath.Join(dir, spoolPattern))
	for _, s := range segments {
		if fi, err := os.Stat(s); err == nil {
			spooled += fi.Size()
		}
	}
	found, _ := filepath.Glob(filepath.Join(dir, journalPattern))
	return spooled, len(found)
}
