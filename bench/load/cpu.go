package load

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat: 100
// on every Linux architecture Go supports, whatever the kernel's own HZ.
const clockTicks = 100

// ProcStat is what the harness reads of one line of /proc/PID/stat (see
// proc(5)). CPU times are in clock ticks (1/100 s).
type ProcStat struct {
	PID  int
	Comm string // the command name, without its parentheses
	PPID int
	// UTime and STime are the process's own user and system time; CUTime
	// and CSTime those of its children it has waited for.
	UTime, STime, CUTime, CSTime uint64
	// RSSPages is the resident set in pages.
	RSSPages int64
}

// CPU returns the process's own user and system time.
func (s *ProcStat) CPU() time.Duration { return ticks(s.UTime + s.STime) }

// RSS is the process's resident memory in bytes.
func (s *ProcStat) RSS() int64 { return s.RSSPages * int64(os.Getpagesize()) }

func ticks(n uint64) time.Duration { return time.Duration(n) * (time.Second / clockTicks) }

var errShortStat = errors.New("short stat line")

// ParseProcStat parses one /proc/PID/stat line. The command name sits
// between the first '(' and the last ')': it may itself hold spaces and
// parentheses, so the fields are counted from the last ')'.
func ParseProcStat(b []byte) (ProcStat, error) {
	var s ProcStat
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return s, fmt.Errorf("cannot parse process stat: %w", errShortStat)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return s, fmt.Errorf("cannot parse process stat: pid: %w", err)
	}
	s.PID, s.Comm = pid, string(b[open+1:end])
	// Fields after the name, numbered as in proc(5) from 3 (state).
	rest := bytes.Fields(b[end+1:])
	field := func(n int) []byte { return rest[n-3] }
	if len(rest) < 24-2 {
		return s, fmt.Errorf("cannot parse process stat of %d: %w", pid, errShortStat)
	}
	u := func(n int) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = strconv.ParseUint(string(field(n)), 10, 64)
		return v
	}
	ppid := u(4)
	s.UTime, s.STime, s.CUTime, s.CSTime = u(14), u(15), u(16), u(17)
	if err != nil {
		return s, fmt.Errorf("cannot parse process stat of %d: %w", pid, err)
	}
	s.PPID = int(ppid)
	// rss may be negative in theory (a signed field in the kernel).
	if s.RSSPages, err = strconv.ParseInt(string(field(24)), 10, 64); err != nil {
		return s, fmt.Errorf("cannot parse process stat of %d: rss: %w", pid, err)
	}
	return s, nil
}

// ReadProcStat reads /proc/PID/stat (Linux only).
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, fmt.Errorf("cannot read stat of process %d: %w", pid, err)
	}
	return ParseProcStat(b)
}

// ProcUsage is a process tree at one moment: a process and every live
// descendant of it.
type ProcUsage struct {
	// CPU is the user and system time of every process of the tree,
	// including what each has reaped of its own children: a worker that
	// exits between two readings moves from its own times into its
	// parent's, and the tree's total goes on counting it.
	CPU time.Duration
	// RSS is the sum of the processes' resident sets (pages they share are
	// counted once per process).
	RSS int64
	// Processes is how many processes the tree holds.
	Processes int
}

// ReadProcTree reads the process pid and its descendants (an nginx master
// and its workers, a postmaster and its backends). Descendants are found
// by scanning /proc; one that cannot be read (it just exited) is skipped.
// The root must be readable.
func ReadProcTree(pid int) (ProcUsage, error) {
	root, err := ReadProcStat(pid)
	if err != nil {
		return ProcUsage{}, err
	}
	u := ProcUsage{Processes: 1}
	add := func(s *ProcStat) {
		u.CPU += ticks(s.UTime + s.STime + s.CUTime + s.CSTime)
		u.RSS += s.RSS()
	}
	add(&root)
	for _, s := range descendants(pid) {
		add(&s)
		u.Processes++
	}
	return u, nil
}

// Descendants lists the processes below pid: its children, theirs, and
// so on, found as ReadProcTree finds them.
func Descendants(pid int) []int {
	var ids []int
	for _, s := range descendants(pid) {
		ids = append(ids, s.PID)
	}
	return ids
}

// descendants reads every process below pid by scanning /proc once. A
// process that cannot be read (it just exited) is skipped; init's
// descendants are every process there is, so pid 1 has none here.
func descendants(pid int) []ProcStat {
	entries, err := os.ReadDir("/proc")
	if err != nil || pid == 1 {
		return nil
	}
	children := map[int][]ProcStat{}
	for _, e := range entries {
		id, err := strconv.Atoi(e.Name())
		if err != nil || id == pid {
			continue
		}
		s, err := ReadProcStat(id)
		if err != nil {
			continue
		}
		children[s.PPID] = append(children[s.PPID], s)
	}
	var out []ProcStat
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// procMeter measures one process tree over a target's measured windows.
type procMeter struct {
	proc Proc

	start  ProcUsage
	began  bool
	cpu    time.Duration // summed over the windows
	last   ProcUsage     // at the end of the last window
	ended  int           // windows measured
	broken bool          // a reading failed: no figures
}

// read takes one reading of the meter's process: with its descendants,
// or, for a process measured alone, of it only.
func (m *procMeter) read() (ProcUsage, error) {
	if !m.proc.Alone {
		return ReadProcTree(m.proc.PID)
	}
	s, err := ReadProcStat(m.proc.PID)
	if err != nil {
		return ProcUsage{}, err
	}
	return ProcUsage{CPU: s.CPU(), RSS: s.RSS(), Processes: 1}, nil
}

func (m *procMeter) begin() {
	u, err := m.read()
	m.start, m.began = u, err == nil
	if err != nil {
		m.broken = true
	}
}

func (m *procMeter) end() {
	if !m.began {
		return
	}
	m.began = false
	u, err := m.read()
	if err != nil {
		m.broken = true
		return
	}
	m.cpu += max(u.CPU-m.start.CPU, 0)
	m.last = u
	m.ended++
}

// cpuWindow is one measured window's readings of a runner's processes:
// the first at the window's start, after any warm-up, the last once the
// window's requests have ended.
type cpuWindow struct {
	meters  []*procMeter
	machine *machineMeter
	timer   *time.Timer   // the start reading, when it is due later
	began   chan struct{} // closed once the start reading is taken
	once    sync.Once
}

// beginCPU takes the start reading of every process of the target at
// from: at once when from has come, else on a timer (the end of a
// warm-up). Nil when the target has no process to measure.
func (r *runner) beginCPU(from time.Time) *cpuWindow {
	if len(r.meters) == 0 {
		return nil
	}
	w := &cpuWindow{meters: r.meters, machine: r.machine, began: make(chan struct{})}
	read := func() {
		for _, m := range w.meters {
			m.begin()
		}
		w.machine.begin()
		close(w.began)
	}
	if d := time.Until(from); d > 0 {
		w.timer = time.AfterFunc(d, read)
	} else {
		read()
	}
	return w
}

// end takes the end reading, unless the window never began: the phase
// stopped during its warm-up.
func (w *cpuWindow) end() {
	if w == nil {
		return
	}
	w.once.Do(func() {
		if w.timer != nil && w.timer.Stop() {
			return // the start reading was never taken
		}
		<-w.began
		for _, m := range w.meters {
			m.end()
		}
		w.machine.end()
	})
}

// procCosts returns the figures of the runner's processes so far, nil
// when it has none or none could be read.
func (r *runner) procCosts() []ProcCost {
	var out []ProcCost
	for _, m := range r.meters {
		if m.broken || m.ended == 0 {
			continue
		}
		out = append(out, ProcCost{
			Name: m.proc.Name, PID: m.proc.PID, Own: m.proc.Own,
			CPU: m.cpu, RSS: m.last.RSS, Processes: m.last.Processes,
		})
	}
	return out
}

// costs derives the per-request and per-frame figures of r.CPU.
func (r *Result) costs() {
	for i := range r.CPU {
		c := &r.CPU[i]
		c.PerKRequests, c.PerKFrames = 0, 0
		if r.Completed > 0 {
			c.PerKRequests = c.CPU.Seconds() * 1000 / float64(r.Completed)
		}
		if r.Frames > 0 {
			c.PerKFrames = c.CPU.Seconds() * 1000 / float64(r.Frames)
		}
	}
}

// procs returns the processes to measure for t: its Procs, or its PID
// alone, as its own process, when it names no Procs.
func (t *Target) procs() []Proc {
	if len(t.Procs) > 0 {
		return t.Procs
	}
	if t.PID > 0 {
		return []Proc{{Name: t.Name, PID: t.PID, Own: true}}
	}
	return nil
}

// CPUBusy is how busy one CPU of the machine was over a target's measured
// windows, from /proc/stat. It counts what a process's time may not hold:
// the kernel's softirq work, where a loopback connection's receiving side
// runs, is charged to the process it interrupted, or, on kernels built to
// account interrupt time apart (CONFIG_IRQ_TIME_ACCOUNTING), to none. A
// CPU busy all the windows long was
// what bounded the target's throughput; which processes ran there says
// whose cost that was (a pinned run's placement).
type CPUBusy struct {
	CPU int `json:"cpu"`
	// Busy is the fraction of the windows the CPU was neither idle nor
	// idle waiting on I/O: user, system, interrupt, softirq and steal time.
	Busy float64 `json:"busy"`
	// SoftIRQ is the part of Busy spent in softirqs, and Steal the part a
	// hypervisor gave to other machines.
	SoftIRQ float64 `json:"softirq"`
	Steal   float64 `json:"steal"`
}

// cpuTimes are one CPU's counters from /proc/stat, in clock ticks.
type cpuTimes struct {
	busy, softirq, steal, total uint64
}

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	d := func(x, y uint64) uint64 { return x - min(x, y) }
	return cpuTimes{d(a.busy, b.busy), d(a.softirq, b.softirq), d(a.steal, b.steal), d(a.total, b.total)}
}

func (a cpuTimes) add(b cpuTimes) cpuTimes {
	return cpuTimes{a.busy + b.busy, a.softirq + b.softirq, a.steal + b.steal, a.total + b.total}
}

// parseCPUStat reads the per-CPU lines of /proc/stat ("cpu3 user nice
// system idle iowait irq softirq steal guest guest_nice", see proc(5));
// guest time is already part of user time. The machine's total line and
// every other line are skipped.
func parseCPUStat(b []byte) (map[int]cpuTimes, error) {
	out := map[int]cpuTimes{}
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) < 9 || !bytes.HasPrefix(f[0], []byte("cpu")) || len(f[0]) == 3 {
			continue
		}
		cpu, err := strconv.Atoi(string(f[0][3:]))
		if err != nil {
			return nil, fmt.Errorf("cannot parse CPU stat line %q: %w", f[0], err)
		}
		var v [8]uint64 // user nice system idle iowait irq softirq steal
		for i := range v {
			if v[i], err = strconv.ParseUint(string(f[i+1]), 10, 64); err != nil {
				return nil, fmt.Errorf("cannot parse CPU stat of cpu%d: %w", cpu, err)
			}
		}
		idle := v[3] + v[4]
		t := cpuTimes{softirq: v[6], steal: v[7]}
		for _, x := range v {
			t.total += x
		}
		t.busy = t.total - idle
		out[cpu] = t
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cannot parse CPU stat: %w", errShortStat)
	}
	return out, nil
}

// machineMeter measures the machine's CPUs over a target's measured
// windows, beside its processes.
type machineMeter struct {
	start  map[int]cpuTimes
	sum    map[int]cpuTimes // over the windows
	broken bool             // a reading failed: no figures
}

func readCPUStat() (map[int]cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("cannot read the CPUs' times: %w", err)
	}
	return parseCPUStat(b)
}

func (m *machineMeter) begin() {
	if m == nil {
		return
	}
	var err error
	if m.start, err = readCPUStat(); err != nil {
		m.broken = true
	}
}

func (m *machineMeter) end() {
	if m == nil || m.start == nil {
		return
	}
	now, err := readCPUStat()
	if err != nil {
		m.broken = true
		return
	}
	if m.sum == nil {
		m.sum = map[int]cpuTimes{}
	}
	for cpu, t := range now {
		// A CPU brought online during the window has no start: skip it.
		if s, ok := m.start[cpu]; ok {
			m.sum[cpu] = m.sum[cpu].add(t.sub(s))
		}
	}
	m.start = nil
}

// busy returns the figures of every CPU so far, by CPU number; nil when
// no window was measured.
func (m *machineMeter) busy() []CPUBusy {
	if m == nil || m.broken || len(m.sum) == 0 {
		return nil
	}
	out := make([]CPUBusy, 0, len(m.sum))
	for cpu, t := range m.sum {
		if t.total == 0 {
			continue
		}
		f := func(n uint64) float64 { return float64(n) / float64(t.total) }
		out = append(out, CPUBusy{CPU: cpu, Busy: f(t.busy), SoftIRQ: f(t.softirq), Steal: f(t.steal)})
	}
	slices.SortFunc(out, func(a, b CPUBusy) int { return a.CPU - b.CPU })
	return out
}
