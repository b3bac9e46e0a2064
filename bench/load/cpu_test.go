package load

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/cputest"
)

func TestParseProcStat(t *testing.T) {
	// The fields after the name: state ppid pgrp session tty tpgid flags
	// minflt cminflt majflt cmajflt utime stime cutime cstime priority nice
	// threads itrealvalue starttime vsize rss ...
	const tail = " S 41 42 42 0 -1 4194560 100 0 0 0 250 75 12 3 20 0 9 0 5000 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	f := func(line string, want ProcStat) {
		t.Helper()
		got, err := ParseProcStat([]byte(line))
		require.NoError(t, err, line)
		require.Equal(t, want, got)
	}
	want := ProcStat{PID: 7, Comm: "gateway", PPID: 41, UTime: 250, STime: 75, CUTime: 12, CSTime: 3, RSSPages: 2048}
	f("7 (gateway)"+tail+"\n", want)
	want.Comm = "a b) (c d"
	f("7 (a b) (c d)"+tail, want)
	want.Comm = ") 1 2 3 ("
	f("7 () 1 2 3 ()"+tail, want)
	want.Comm = ""
	f("7 ()"+tail, want)
	require.Equal(t, 3250*time.Millisecond, want.CPU(), "250+75 ticks of 10 ms")

	for _, bad := range []string{
		"",
		"7 gateway" + tail,
		"x (gateway)" + tail,
		"7 (gateway) S 41 42",
		"7 (gateway)" + strings.Replace(tail, " 250 ", " -1 ", 1),
		"7 (gateway)" + strings.Replace(tail, " 2048 ", " many ", 1),
	} {
		_, err := ParseProcStat([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}

func TestReadProcStatSelf(t *testing.T) {
	cputest.NeedProc(t, "/proc/self/stat")
	s, err := ReadProcStat(os.Getpid())
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), s.PID)
	require.Equal(t, os.Getppid(), s.PPID)
	require.Positive(t, s.RSSPages)
	_, err = ReadProcStat(-1)
	require.Error(t, err)
}

// A process tree counts its descendants: a shell and the two sleeps it
// started.
func TestReadProcTree(t *testing.T) {
	cputest.NeedProc(t, "/proc/self/stat")
	cmd := startChild(t, exec.Command("sh", "-c", "sleep 30 & sleep 30 & wait"))
	require.Eventually(t, func() bool {
		u, err := ReadProcTree(cmd.Process.Pid)
		return err == nil && u.Processes == 3 && u.RSS > 0
	}, 5*time.Second, 10*time.Millisecond)
}

// A process measured alone leaves its children out, as the load
// generator must: its children are the targets it compares, measured on
// their own rows.
func TestProcMeterAlone(t *testing.T) {
	cputest.NeedProc(t, "/proc/self/stat")
	alone := &procMeter{proc: Proc{Name: "load generator", PID: os.Getpid(), Alone: true}}
	tree := &procMeter{proc: Proc{Name: "with children", PID: os.Getpid()}}
	alone.begin()
	tree.begin()
	cmd := startSpinner(t)
	require.Eventually(t, func() bool {
		s, err := ReadProcStat(cmd.Process.Pid)
		// /proc counts in 10 ms ticks, split between user and system time.
		return err == nil && s.CPU() >= spinCPU-20*time.Millisecond
	}, time.Minute, 10*time.Millisecond, "the child spins")
	alone.end()
	tree.end()
	require.False(t, alone.broken || tree.broken)
	require.Equal(t, 1, alone.last.Processes)
	require.Equal(t, 2, tree.last.Processes)
	require.GreaterOrEqual(t, tree.cpu-alone.cpu, spinCPU-60*time.Millisecond,
		"the tree counts the child's spin, the process alone does not")
}

// A target with a process carries its CPU time over the measured window
// and its memory at the end; one without carries none, not zeros.
func TestCompareReportsCPU(t *testing.T) {
	cputest.NeedProc(t, "/proc/self/stat")
	base := startSim(t)
	sc := quick(t, Scenario{Concurrency: 4, Stream: true, ReplyTokens: 8, Duration: 800 * time.Millisecond,
		Warmup: 100 * time.Millisecond})
	// This process stands in for a target's own: the harness and the
	// simulator run in it, so it spends CPU while either target is loaded.
	self := os.Getpid()
	results, err := Compare(context.Background(), sc, []Target{
		{Name: "bare", BaseURL: base, Wire: WireUpstream},
		{Name: "measured", BaseURL: base, Wire: WireUpstream,
			Procs: []Proc{{Name: "self", PID: self, Own: true}, {Name: "gone", PID: 1 << 30}}},
		{Name: "by-pid", BaseURL: base, Wire: WireUpstream, PID: self},
	}, Options{Round: 200 * time.Millisecond})
	require.NoError(t, err)

	bare := results[0]
	require.Positive(t, bare.Completed)
	require.Nil(t, bare.CPU)
	raw, err := json.Marshal(bare)
	require.NoError(t, err)
	require.NotContains(t, string(raw), `"cpu"`)

	for _, res := range results[1:] {
		require.Positive(t, res.Completed)
		require.Len(t, res.CPU, 1, "%s: a process that cannot be read has no figures", res.Target)
		c := res.CPU[0]
		require.Equal(t, self, c.PID)
		require.True(t, c.Own)
		require.Positive(t, c.CPU, res.Target)
		require.InDelta(t, c.CPU.Seconds()*1000/float64(res.Completed), c.PerKRequests, 1e-12)
		require.InDelta(t, c.CPU.Seconds()*1000/float64(res.Frames), c.PerKFrames, 1e-12)
		require.Positive(t, c.RSS)
		require.GreaterOrEqual(t, c.Processes, 1)
		// Over the window only: no more than the whole run's CPU time.
		require.Less(t, c.CPU, 4*time.Second)
	}
	require.Equal(t, "self", results[1].CPU[0].Name)
	require.Equal(t, "by-pid", results[2].CPU[0].Name, "PID alone is the target's own process")

	raw, err = json.Marshal(results[1])
	require.NoError(t, err)
	require.Contains(t, string(raw), `"cpu_s_per_1k_requests"`)
	require.Contains(t, string(raw), `"cpu_s_per_1k_frames"`)
	require.Contains(t, string(raw), `"rss_bytes"`)
}

// spinEnv makes the test binary, started with it set, a process that
// spins until it has used spinCPU of CPU time and then sleeps: CPU spent in
// a known amount, however busy the machine is.
const (
	spinEnv = "LOAD_TEST_SPIN"
	spinCPU = 300 * time.Millisecond
)

func TestMain(m *testing.M) {
	if os.Getenv(spinEnv) != "" {
		if spinSetup != nil {
			spinSetup()
		}
		for {
			var ru syscall.Rusage
			if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil ||
				time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) >= spinCPU {
				break
			}
			for i := 0; i < 1_000_000; i++ {
				spinSink += i
			}
		}
		time.Sleep(time.Minute)
		return
	}
	os.Exit(m.Run())
}

var spinSink int

// spinSetup, when set, readies a spinning child before it spins: pins it
// to a CPU where the system allows that.
var spinSetup func()

// The CPU window is the measured one: a run whose warm-up burns CPU in
// the measured process, and whose window does not, reports (almost) none.
func TestCPUWindowExcludesWarmup(t *testing.T) {
	cputest.NeedProc(t, "/proc/self/stat")
	base := serve(t, (&arrivals{}).handler("x"))
	// A child spins through the warm-up, long enough on any machine for
	// its CPU time to be spent, and the window finds it asleep.
	cmd := startSpinner(t)
	sc := quick(t, Scenario{Concurrency: 1, Warmup: 4 * time.Second, Duration: 300 * time.Millisecond})
	res, err := Run(context.Background(), sc, Target{Name: "t", BaseURL: base, PID: cmd.Process.Pid}, Options{})
	require.NoError(t, err)
	require.Len(t, res.CPU, 1)
	whole, err := ReadProcTree(cmd.Process.Pid)
	require.NoError(t, err)
	require.GreaterOrEqual(t, whole.CPU, spinCPU-20*time.Millisecond, "the child spun during the warm-up")
	require.LessOrEqual(t, res.CPU[0].CPU, 50*time.Millisecond, "and the window did not count it")
}

// startChild starts cmd and kills it when the test ends.
func startChild(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// startSpinner starts this test binary as a child that spends spinCPU of
// CPU time and then sleeps (TestMain).
func startSpinner(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), spinEnv+"=1")
	return startChild(t, cmd)
}
