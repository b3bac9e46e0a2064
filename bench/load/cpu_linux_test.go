package load

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/edgegw/gateway/hotpath/cputest"
)

// spinCPUEnv pins a spinning child (spinEnv) to the CPU it names, and
// makes it spin until it is killed.
const spinCPUEnv = "LOAD_TEST_SPIN_CPU"

func init() {
	spinSetup = func() {
		cpu, err := strconv.Atoi(os.Getenv(spinCPUEnv))
		if err != nil {
			return
		}
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		if unix.SchedSetaffinity(0, &set) != nil {
			os.Exit(3)
		}
		for {
			spinSink++
		}
	}
}

func TestParseCPUStat(t *testing.T) {
	stat := "cpu  900 10 300 5000 40 0 90 20 0 0\n" +
		"cpu0 500 5 200 1000 30 0 60 10 0 0\n" +
		"cpu1 400 5 100 4000 10 0 30 10 7 0\n" +
		"intr 123 4 5\nctxt 99\n"
	got, err := parseCPUStat([]byte(stat))
	require.NoError(t, err)
	require.Equal(t, map[int]cpuTimes{
		// busy: everything but idle and iowait; guest is inside user.
		0: {busy: 775, softirq: 60, steal: 10, total: 1805},
		1: {busy: 545, softirq: 30, steal: 10, total: 4555},
	}, got)

	for _, bad := range []string{"", "intr 1 2\n", "cpuX 1 2 3 4 5 6 7 8\n", "cpu0 1 2 3 4 5 6 7 x\n"} {
		_, err := parseCPUStat([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}

// A CPU a process keeps busy through a target's window reads as busy
// there, and every CPU's figures are fractions of its time: busy holds
// softirq and steal.
func TestMachineCPUsInResult(t *testing.T) {
	cputest.NeedProc(t, "/proc/stat")
	var allowed unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &allowed))
	cpu := -1
	for i := range 1024 {
		if allowed.IsSet(i) {
			cpu = i
		}
	}
	require.GreaterOrEqual(t, cpu, 0)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), spinEnv+"=1", spinCPUEnv+"="+strconv.Itoa(cpu))
	startChild(t, cmd)

	base := serve(t, (&arrivals{}).handler("x"))
	sc := quick(t, Scenario{Concurrency: 1, Warmup: 200 * time.Millisecond, Duration: 600 * time.Millisecond})
	res, err := Run(context.Background(), sc, Target{Name: "t", BaseURL: base, PID: cmd.Process.Pid}, Options{})
	require.NoError(t, err)
	require.NotEmpty(t, res.CPUs)
	seen := false
	for _, c := range res.CPUs {
		require.True(t, c.Busy >= 0 && c.Busy <= 1, "%+v", c)
		require.LessOrEqual(t, c.SoftIRQ+c.Steal, c.Busy+1e-9, "%+v", c)
		if c.CPU == cpu {
			seen = true
			require.GreaterOrEqual(t, c.Busy, 0.9, "CPU %d had a process spinning on it all the window: %+v", cpu, c)
		}
	}
	require.True(t, seen, "CPU %d is among %+v", cpu, res.CPUs)
}
